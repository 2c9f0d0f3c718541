"""ToMe (Bolya et al., ICLR 2023, "Token Merging: Your ViT but Faster"): every block merges its r most similar pairs
of tokens between its attention and its MLP, by bipartite soft matching on its keys, sizes weighting the merge and
the later attention. No training.

The merge schedule and the r for a MAC target (:mod:`~vitprune.methods.tome.schedule`) and the pipeline behind
``vitprune prune tome`` (:mod:`~vitprune.methods.tome.pipeline`). The merging operation itself is shared token
reduction (:func:`vitprune.surgery.merge_tokens`).
"""

from vitprune.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    ".schedule": ("apply_merging", "r_for_macs", "r_schedule"),
})

__all__ = ["apply_merging", "r_for_macs", "r_schedule"]
