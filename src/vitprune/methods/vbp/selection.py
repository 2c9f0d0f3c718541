"""VBP Steps 2 and 3: rank every hidden neuron of the network by variance, remove the lowest, fold their means."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.errors import VitpruneError
from vitprune.measure import count_macs
from vitprune.measure.target import MacTarget, reach
from vitprune.methods.vbp.config import ROUNDINGS
from vitprune.methods.vbp.statistics import NeuronStats
from vitprune.surgery import compensate_mean_shift, prune_mlp_neurons


def removal_count(widths: Iterable[int], ratio: float, *, rounding: str = "ceil", min_width: int = 0) -> int:
    """How many neurons ``ratio`` of MLPs of these ``widths`` removes; a one-line error if that cannot be done."""
    if not 0 <= ratio <= 1:
        raise VitpruneError(f"the pruning ratio must be between 0 and 1, got {ratio}")
    if rounding not in ROUNDINGS:
        raise VitpruneError(f"unknown rounding {rounding!r} (choose from: {', '.join(ROUNDINGS)})")
    widths = list(widths)
    # Rounded first so that float error (0.7 * 10 = 7.000000000000001) cannot tip a ceil over.
    count = int(ROUNDINGS[rounding](round(ratio * sum(widths), 9)))
    if count > sum(max(0, w - min_width) for w in widths):
        raise VitpruneError(f"cannot remove {ratio:.0%} of the neurons while keeping {min_width} per MLP")
    return count


def select_neurons(scores: dict[int, torch.Tensor], ratio: float, *, rounding: str = "ceil",
                   min_width: int = 0) -> dict[int, list[int]]:
    """The ``ratio`` share of all neurons with the lowest score, ranked globally; returns removed indices by block.

    Ties are broken by block, then neuron index (a stable order). ``min_width`` keeps at least
    that many neurons per MLP (0, the paper's setting, lets a layer lose all of them).
    """
    count = removal_count((len(s) for s in scores.values()), ratio, rounding=rounding, min_width=min_width)
    return select_count(scores, count, min_width=min_width)


def select_count(scores: dict[int, torch.Tensor], count: int, *, min_width: int = 0) -> dict[int, list[int]]:
    """The ``count`` neurons of lowest score, ranked globally (ties by block, then index), each MLP keeping at least
    ``min_width``; returns removed indices by block."""
    blocks = sorted(scores)
    flat = torch.cat([scores[b].detach().double().cpu() for b in blocks])
    owner = torch.cat([torch.full((len(scores[b]),), b) for b in blocks])
    neuron = torch.cat([torch.arange(len(scores[b])) for b in blocks])
    order = torch.sort(flat, stable=True).indices.tolist()
    removed: dict[int, list[int]] = {b: [] for b in blocks}
    for i in order:
        if count == 0:
            break
        b = int(owner[i])
        if len(scores[b]) - len(removed[b]) > min_width:
            removed[b].append(int(neuron[i]))
            count -= 1
    return {b: sorted(r) for b, r in removed.items()}


def select_for_macs(model: nn.Module, scores: dict[int, torch.Tensor], target: MacTarget, *, min_width: int = 0,
                    cost: Callable[[nn.Module], float] | None = None) -> dict[int, list[int]]:
    """The fewest lowest-scored neurons (ranked as :func:`select_neurons` ranks them) whose removal brings ``model``
    to at most ``target`` by ``cost`` (default: MACs per image in the target's convention) :func:`~vitprune.measure.
    target.reach` finds them, so a target at or above the model's own cost, or one no removal reaches (every MLP
    left a constant, which VBP refuses, at most), is one line."""
    measure = cost or (lambda m: count_macs(m, convention=target.convention).macs)
    # Every neuron of the network gone leaves every MLP a constant, which VBP refuses.
    most = sum(max(0, len(s) - min_width) for s in scores.values()) - (min_width == 0)
    known: dict[float, float] = {}

    def after(count: float) -> float:
        if count not in known:
            work = copy.deepcopy(model)
            prune_by_selection(work, select_count(scores, int(count), min_width=min_width))
            known[count] = measure(work)
        return known[count]

    none = measure(model)
    # Neurons of a plain ViT all cost the same, so interpolation lands next to the count at once.
    wanted, full = target.of(none), after(most)
    guess = (none - wanted) / (none - full) * most if full < none else None
    count = reach(after, target, model, 0, most, what="VBP's neuron removal", dense=none, integer=True,
                  guess=None if guess is None else math.ceil(guess))
    return select_count(scores, int(count), min_width=min_width)


def prune_by_selection(model: nn.Module, removed: dict[int, list[int]],
                       stats: dict[int, NeuronStats] | None = None) -> None:
    """Remove the given neurons of each block; with ``stats``, first fold their means into ``fc2``'s bias."""
    adapter = get_adapter(model)
    for block, neurons in removed.items():
        if not neurons:
            continue
        if stats is not None:
            compensate_mean_shift(model, block, neurons, stats[block].mean)
        gone = set(neurons)
        keep = [i for i in range(adapter.block(block).mlp.hidden_features) if i not in gone]
        prune_mlp_neurons(model, block, keep)
