"""STAR: token pruning by fused online [CLS] attention and an offline per-position prior, with ACS keep rates.

So far: the ACS keep-rate schedule (:mod:`~vitprune.methods.star.schedule`) and the LRP
inter-layer scores (:mod:`~vitprune.methods.star.lrp`). The pruning blocks themselves are shared
surgery (:func:`vitprune.surgery.prune_tokens`). Issue 7 is in progress.
"""

from vitprune.methods.star.lrp import inter_layer_scores
from vitprune.methods.star.schedule import (
    ANCHORS, apply_keep_rates, average_cosine_similarity, keep_rates, rho_for_macs,
)

__all__ = [
    "ANCHORS", "apply_keep_rates", "average_cosine_similarity", "inter_layer_scores", "keep_rates", "rho_for_macs",
]
