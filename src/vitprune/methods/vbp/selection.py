"""VBP Steps 2 and 3: rank every hidden neuron of the network by variance, remove the lowest, fold their means."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.errors import VitpruneError
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
    blocks = sorted(scores)
    count = removal_count((len(scores[b]) for b in blocks), ratio, rounding=rounding, min_width=min_width)
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
