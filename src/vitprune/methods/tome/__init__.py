"""ToMe (Bolya et al., ICLR 2023, "Token Merging: Your ViT but Faster"): every block merges its r most similar pairs
of tokens between its attention and its MLP, by bipartite soft matching on its keys, sizes weighting the merge and
the later attention. No training.

The merging operation and its edit (:mod:`~vitprune.methods.tome.merging`: :class:`TokenMerging`, run by the
families' token-reduction hosts, and :func:`merge_tokens`), the merge schedule and the r for a MAC target
(:mod:`~vitprune.methods.tome.schedule`) and the pipeline behind ``vitprune prune tome``
(:mod:`~vitprune.methods.tome.pipeline`).
"""

from vitprune.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    ".merging": ("TokenMerging", "merge_tokens"),
    ".schedule": ("apply_merging", "r_for_macs", "r_schedule"),
})

__all__ = ["TokenMerging", "apply_merging", "merge_tokens", "r_for_macs", "r_schedule"]
