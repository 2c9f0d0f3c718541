"""Token reduction: blocks that run a token operation between their attention and their MLP.

STAR's pruning (``prune_tokens``) keeps the prefix tokens ([CLS], distillation, registers) and the top
``ceil(keep_rate · n)`` of the ``n`` patch tokens entering the block, ranked by the fusion of its own [CLS] attention
and a per-position prior; the prior is a buffer, so it travels in the weights file, and the edit records the rate and
``alpha``. A keep rate of 1 keeps every token and changes nothing (static mode). Every token method's edit installs
its operation through :func:`token_operation`: STAR's here, another's in its own folder (ToMe's merging).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

from vitprune.adapters import ViTAdapter, get_adapter
from vitprune.adapters.tokens import TokenOp, TokenSelection
from vitprune.errors import VitpruneError
from vitprune.recipe.edits import register_edit

Op = TypeVar("Op", bound=TokenOp)


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
    op = token_operation(model, block, TokenSelection, lambda adapter: TokenSelection(
        num_prefix_tokens=adapter.num_prefix_tokens, num_patches=adapter.num_patches))
    op.keep_rate, op.alpha, op.adaptive = keep_rate, alpha, adaptive


def token_operation(model: nn.Module, block: int, kind: type[Op], build: Callable[[ViTAdapter], Op]) -> Op:
    """Block ``block``'s token operation of type ``kind``: the one it runs, else ``build(adapter)``'s, installed.

    A token method's edit (STAR's :func:`prune_tokens`, or one in the method's folder, as ToMe's) sets its
    settings on what this returns. It checks that the model can reduce tokens and has the block, and that no block
    runs another kind of operation: a merged token stands for no one patch position, which pruning's prior and
    positions follow, so one model runs one kind.
    """
    adapter = get_adapter(model, needs=("token_reduction",), by="token reduction")
    views = adapter.blocks()
    if not 0 <= block < len(views):
        raise ValueError(f"block {block} is out of range: the model has {len(views)} blocks")
    other = next((v for v in views if v.token_op is not None and not isinstance(v.token_op, kind)), None)
    if other is not None:
        raise ValueError(f"block {other.index} already {other.token_op.does}; one model prunes or merges tokens, not "
                         "both")
    current = views[block].token_op
    if isinstance(current, kind):
        return current
    op = build(adapter)
    adapter.set_token_op(block, op)
    return op


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
