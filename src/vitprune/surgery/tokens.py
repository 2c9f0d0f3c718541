"""Token pruning: blocks that drop low-scoring patch tokens between attention and MLP (STAR, EViT placement).

A pruned block keeps the prefix tokens ([CLS], distillation, registers) and the top
``ceil(keep_rate · n)`` of the ``n`` patch tokens entering it, ranked by the fusion of its own
[CLS] attention and a per-position prior (the adapter's token-pruning block).
The prior is a buffer, so it travels in the weights file; the edit records the rate and ``alpha``.
A keep rate of 1 keeps every token and changes nothing (static mode).
"""

from __future__ import annotations

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.recipe.edits import register_edit


@register_edit("prune_tokens")
def prune_tokens(model: nn.Module, block: int, keep_rate: float, alpha: float = 1.0, adaptive: bool = False) -> None:
    """Make block ``block`` keep ``ceil(keep_rate · n)`` of its ``n`` patch tokens before its MLP.

    ``alpha`` weighs the block's online [CLS] attention against the per-position prior (1: attention
    only, STAR's intra-layer score; 0: prior only). ``adaptive`` (a-STAR) keeps, per image, the
    fewest top tokens whose normalised score reaches ``keep_rate`` instead (never more). Applying
    it again to the same block changes the settings. A block with no attention head left (removed
    attention, or every head pruned) has no [CLS] attention to rank by and raises ``ValueError``.
    """
    if not 0 < keep_rate <= 1:
        raise ValueError(f"keep rate must be in (0, 1], got {keep_rate}")
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    adapter = get_adapter(model, needs=("token_pruning",), by="token pruning")
    if not 0 <= block < len(adapter.blocks()):
        raise ValueError(f"block {block} is out of range: the model has {len(adapter.blocks())} blocks")
    adapter.set_token_pruning(block, keep_rate, alpha, adaptive)


def token_pruning_blocks(model: nn.Module) -> dict[int, nn.Module]:
    """The blocks that prune tokens, by index."""
    return {view.index: view.module for view in get_adapter(model).blocks() if view.token_keep_rate is not None}


def set_token_prior(model: nn.Module, block: int, prior: torch.Tensor) -> None:
    """Install the per-position prior (one positive score per original patch position) of pruning block ``block``."""
    get_adapter(model).set_token_prior(block, prior)
