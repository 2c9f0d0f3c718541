"""ToMe's schedule: tokens merged per block from ``(r, inflect)``, installed as recipe edits, and the r that reaches a
MAC target."""

from __future__ import annotations

import copy

from torch import nn

from vitprune.adapters import get_adapter
from vitprune.measure import MacTarget, count_macs
from vitprune.measure.target import reach
from vitprune.methods.tome.merging import merge_tokens


def r_schedule(r: int, inflect: float, blocks: int) -> list[int]:
    """Tokens to merge in each of ``blocks`` blocks, as ToMe's ``parse_r`` draws them from ``(r, inflect)``: a line
    from ``int(r·(1 − inflect))`` in the first block to ``2r`` minus that in the last, each truncated to an integer
    (so that the authors' token counts come out), ``inflect`` 0 constant, -1 the paper's decreasing schedule."""
    if blocks == 1:
        return [r]
    first = int(r * (1 - inflect))
    last = 2 * r - first
    return [int(first + (last - first) * block / (blocks - 1)) for block in range(blocks)]


def apply_merging(model: nn.Module, schedule: list[int], *, proportional: bool = True) -> list[int]:
    """Make every block with an attention head merge as many tokens as its entry of ``schedule`` says (recipe edits;
    0 too: the block then runs its attention with the merged tokens' sizes, as every merging block does, which is
    also the form that exports to ONNX); returns what each block was given. Blocks without a head (depth pruning
    removed their attention, HiAP every head) have no keys to match by and merge none, whatever their entry."""
    views = get_adapter(model).blocks()
    if len(schedule) != len(views):
        raise ValueError(f"{len(schedule)} merge counts for a model of {len(views)} blocks")
    given = []
    for view, r in zip(views, schedule, strict=True):
        headed = view.attn is not None and view.attn.num_heads > 0
        if headed:
            merge_tokens(model, view.index, r, proportional=proportional)
        given.append(r if headed else 0)
    return given


def r_for_macs(model: nn.Module, target: MacTarget, *, inflect: float = 0.0, above: bool = False) -> int:
    """The smallest ``r`` whose schedule (``inflect``) costs at most ``target``
    (:func:`~vitprune.measure.target.reach`); with ``above``, the largest ``r`` whose schedule still costs more (a
    neuron trim after it reaches the target exactly). MACs do not grow with ``r``; past half the tokens nothing
    more merges."""
    adapter = get_adapter(model)
    blocks, most = len(adapter.blocks()), adapter.num_tokens // 2

    def macs(r: float) -> int:
        scratch = copy.deepcopy(model)
        apply_merging(scratch, r_schedule(int(r), inflect, blocks))
        return count_macs(scratch, convention=target.convention).macs

    return int(reach(macs, target, model, 0, most, integer=True, what="ToMe's merging", above=above))


__all__ = ["apply_merging", "r_for_macs", "r_schedule"]
