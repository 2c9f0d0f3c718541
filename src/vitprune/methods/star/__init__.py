"""STAR: token pruning by fused online [CLS] attention and an offline per-position prior, with ACS keep rates.

The ACS keep-rate schedule (:mod:`~vitprune.methods.star.schedule`), the LRP inter-layer prior
(:mod:`~vitprune.methods.star.lrp`) and the pipeline behind ``vitprune prune star``
(:mod:`~vitprune.methods.star.pipeline`). The pruning blocks themselves, static and adaptive, are
shared surgery (:func:`vitprune.surgery.prune_tokens`).
"""

from vitprune.lazy import lazy_exports
from vitprune.methods.star.config import ANCHORS

__getattr__, __dir__ = lazy_exports(__name__, {
    ".lrp": ("inter_layer_scores",),
    ".schedule": ("apply_keep_rates", "average_cosine_similarity", "keep_rates", "rho_for_macs"),
})

__all__ = [
    "ANCHORS", "apply_keep_rates", "average_cosine_similarity", "inter_layer_scores", "keep_rates", "rho_for_macs",
]
