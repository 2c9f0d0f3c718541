"""Token reduction: blocks that run a token operation between their attention and their MLP.

STAR's pruning (``prune_tokens``) keeps the prefix tokens ([CLS], distillation, registers) and the top
``ceil(keep_rate · n)`` of the ``n`` patch tokens entering the block, ranked by the fusion of its own [CLS] attention
and a per-position prior; the prior is a buffer, so it travels in the weights file, and the edit records the rate and
``alpha``. A keep rate of 1 keeps every token and changes nothing (static mode). ToMe's merging (``merge_tokens``)
merges the ``r`` most similar pairs of tokens by their keys; ``r`` = 0 changes nothing.
"""

from __future__ import annotations

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.adapters.tokens import TokenMerging, TokenOp, TokenSelection
from vitprune.errors import VitpruneError
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
    adapter = _adapter(model, block, TokenSelection)
    current = adapter.blocks()[block].token_op
    if isinstance(current, TokenSelection):
        current.keep_rate, current.alpha, current.adaptive = keep_rate, alpha, adaptive
        return
    adapter.set_token_op(block, TokenSelection(num_prefix_tokens=adapter.num_prefix_tokens,
                                               num_patches=adapter.num_patches, keep_rate=keep_rate, alpha=alpha,
                                               adaptive=adaptive))


@register_edit("merge_tokens")
def merge_tokens(model: nn.Module, block: int, r: int, proportional: bool = True) -> None:
    """Make block ``block`` merge its ``r`` most similar pairs of tokens before its MLP (ToMe's bipartite soft
    matching on its head-averaged keys; at most half its non-prefix tokens), and, with ``proportional``, every later
    block weigh each key by the number of patches its token stands for. ``r`` = 0 changes nothing. Applying it again
    to the same block changes ``r``. A block with no attention head left has no keys to match by and raises
    ``ValueError``."""
    if r < 0:
        raise ValueError(f"r (tokens merged per block) must be at least 0, got {r}")
    adapter = _adapter(model, block, TokenMerging)
    if adapter.pools_every_token:
        raise ValueError("this model's head pools over every token, which would count a merged token as one "
                         "whatever it stands for: token merging needs a head that reads the [CLS] token")
    current = adapter.blocks()[block].token_op
    if isinstance(current, TokenMerging):
        current.r, current.proportional = r, proportional
        return
    adapter.set_token_op(block, TokenMerging(num_prefix_tokens=adapter.num_prefix_tokens, r=r,
                                             proportional=proportional))


def _adapter(model: nn.Module, block: int, kind: type[TokenOp]):
    adapter = get_adapter(model, needs=("token_reduction",), by="token reduction")
    views = adapter.blocks()
    if not 0 <= block < len(views):
        raise ValueError(f"block {block} is out of range: the model has {len(views)} blocks")
    # One kind of operation per model: a merged token stands for no one patch position, which pruning's prior and
    # positions follow.
    other = next((v.index for v in views if v.token_op is not None and not isinstance(v.token_op, kind)), None)
    if other is not None:
        raise ValueError(f"block {other} already {_DOES[type(views[other].token_op)]}; one model prunes or merges "
                         "tokens, not both")
    return adapter


_DOES = {TokenSelection: "prunes tokens", TokenMerging: "merges tokens"}


def token_ops(model: nn.Module) -> dict[int, TokenOp]:
    """The token operations the model's blocks run, by block index."""
    return {view.index: view.token_op for view in get_adapter(model).blocks() if view.token_op is not None}


def token_pruning_blocks(model: nn.Module) -> dict[int, nn.Module]:
    """The blocks that prune tokens (STAR's selection), by index."""
    return {view.index: view.module for view in get_adapter(model).blocks()
            if isinstance(view.token_op, TokenSelection)}


def set_token_prior(model: nn.Module, block: int, prior: torch.Tensor) -> None:
    """Install the per-position prior (one positive score per original patch position) of pruning block ``block``."""
    op = get_adapter(model).blocks()[block].token_op
    if not isinstance(op, TokenSelection):
        raise VitpruneError(f"block {block} does not prune tokens; apply prune_tokens first")
    op.set_prior(prior, block)
