"""What the papers' pruned Swin and ConvNeXt rows imply about structures they do not print (for ``paper_tables.py``).

HetDPT prints its Swin rows' layer counts (10 layers on Swin-S, none on Swin-B, 5 in the draft's Swin-T) but not
which layers, and VBP's global ranking of trained variances decides how many neurons each stage of a Swin or a
ConvNeXt loses. Removing an
attention or a GELU costs the same in every block of a stage (same width, tokens and window), and a neuron costs
``2C + 1`` params and ``2C·T`` MACs in its stage, so the printed counts pin down, or rule out, per-stage splits.
Every cost here is measured by vitprune on the model itself (one removal per stage and type, counted), not typed.
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass

import numpy as np
from torch import nn

import vitprune
from vitprune.measure import count_macs
from vitprune.surgery import prune_depth, prune_mlp_neurons

#: timm's Swin sizes the papers prune.
SWIN = {"T": "swin_tiny_patch4_window7_224", "S": "swin_small_patch4_window7_224", "B": "swin_base_patch4_window7_224"}
#: HetDPT's Swin rows: size -> (where printed, dense params M and GMACs, pruned params M and GMACs, layers or None).
HETDPT_SWIN = {
    "S": ("Table 1", ("49.6", "8.7"), ("43.9", "7.3"), 10),
    "B": ("Table 1", ("87.8", "15.4"), ("55.3", "9.8"), None),
    "T": ("BoundaryDPT draft Table 1; the dense row also Table 9", ("28.3", "4.5"), ("23.4", "3.7"), 5),
}


@dataclass(frozen=True)
class Stage:
    """One stage of a Swin (or ConvNeXt): its blocks, and what one removal there saves (params, MACs full, MACs
    linear; ``attention`` is ``None`` for a family without attention)."""

    blocks: tuple[int, ...]
    attention: tuple[int, int, int] | None
    activation: tuple[int, int, int]
    #: Hidden neurons in the stage, and one neuron's params and MACs.
    neurons: int
    neuron_params: int
    neuron_macs: int


def stages(model: nn.Module) -> list[Stage]:
    """Each stage's blocks and removal costs, measured: one attention (where there is one) and one GELU removed from
    its first block."""
    views = vitprune.get_adapter(model).blocks()
    dense = count_macs(model)
    totals = dense.totals()
    groups: dict[str, list[int]] = {}
    for view in views:
        groups.setdefault(view.name.rsplit(".", 2)[0], []).append(view.index)

    def saving(attention: list[int], activation: list[int]) -> tuple[int, int, int]:
        pruned = copy.deepcopy(model)
        prune_depth(pruned, attention, activation)
        after = count_macs(pruned).totals()
        return tuple(totals[k] - after[k] for k in ("params", "macs_full", "macs_linear"))

    out = []
    for blocks in groups.values():
        first = views[blocks[0]]
        width = first.mlp.fc1.in_features
        out.append(Stage(tuple(blocks), saving([blocks[0]], []) if first.attn is not None else None,
                         saving([], [blocks[0]]),
                         neurons=sum(views[b].mlp.hidden_features for b in blocks), neuron_params=2 * width + 1,
                         neuron_macs=2 * width * dense.blocks[blocks[0]].tokens))
    return out


@dataclass(frozen=True)
class Split:
    """How many attentions and GELUs each stage loses, and what that saves (params, MACs full, MACs linear)."""

    attention: tuple[int, ...]
    activation: tuple[int, ...]
    saved: tuple[int, int, int]

    @property
    def layers(self) -> int:
        return sum(self.attention) + sum(self.activation)

    def describe(self) -> str:
        return (f"attention {'/'.join(map(str, self.attention))}, GELU {'/'.join(map(str, self.activation))} "
                "per stage")

    def blocks(self, stage_list: list[Stage]) -> tuple[list[int], list[int]]:
        """One choice of blocks for the split: each stage's last blocks (every block of a stage costs the same)."""
        return ([b for s, n in zip(stage_list, self.attention) for b in s.blocks[len(s.blocks) - n:]],
                [b for s, n in zip(stage_list, self.activation) for b in s.blocks[len(s.blocks) - n:]])


def _rounds_to(value: float, printed: str) -> bool:
    decimals = len(printed.partition(".")[2])
    return abs(value - float(printed)) <= 0.5 * 10**-decimals + 1e-9


def depth_splits(stage_list: list[Stage], dense: dict[str, int], params_m: str, gmacs: str, convention: str,
                 layers: int | None = None) -> list[Split]:
    """Every per-stage split (of ``layers`` layers, or any number) whose pruned counts round to the printed
    ``params_m`` and ``gmacs`` (in ``convention``), closest first."""
    column = {"full": 1, "linear": 2}[convention]
    per_stage = [list(itertools.product(range(len(s.blocks) + 1), repeat=2)) for s in stage_list]
    found = []
    for choice in itertools.product(*per_stage):
        count = sum(a + g for a, g in choice)
        if count == 0 or (layers is not None and count != layers):
            continue
        saved = tuple(sum(a * s.attention[i] + g * s.activation[i] for (a, g), s in zip(choice, stage_list))
                      for i in range(3))
        params, macs = (dense["params"] - saved[0]) / 1e6, (dense[f"macs_{convention}"] - saved[column]) / 1e9
        if _rounds_to(params, params_m) and _rounds_to(macs, gmacs):
            found.append((abs(params - float(params_m)) / float(params_m) + abs(macs - float(gmacs)) / float(gmacs),
                          Split(tuple(a for a, _ in choice), tuple(g for _, g in choice), saved)))
    return [split for _, split in sorted(found, key=lambda item: item[0])]


def build_split(model: nn.Module, stage_list: list[Stage], split: Split) -> dict[str, int]:
    """The counts vitprune gives ``model`` with ``split`` removed (each stage's last blocks), in every convention."""
    pruned = copy.deepcopy(model)
    prune_depth(pruned, *split.blocks(stage_list))
    return count_macs(pruned, convention="tp").totals()


def closest_hetdpt_split(model: nn.Module, size: str) -> tuple[Split, list[Stage]]:
    """The per-stage split closest to HetDPT's printed Swin-``size`` row (full convention), and ``model``'s stages."""
    _, _, (params, gmacs), layers = HETDPT_SWIN[size]
    stage_list = stages(model)
    return depth_splits(stage_list, count_macs(model).totals(), params, gmacs, "full", layers)[0], stage_list


def uniform_vbp(model: nn.Module, ratio: float) -> dict[str, int]:
    """Counts in every convention after removing ``round(ratio · hidden)`` neurons of every block (the same share in
    every stage)."""
    pruned = copy.deepcopy(model)
    for view in vitprune.get_adapter(pruned).blocks():
        hidden = view.mlp.hidden_features
        prune_mlp_neurons(pruned, view.index, list(range(round(ratio * hidden), hidden)))
    return count_macs(pruned, convention="tp").totals()


def vbp_stage_shares(stage_list: list[Stage], ratio: float, dense: tuple[str, str], pruned: tuple[str, str],
                     steps: int = 4001) -> list[tuple[float, float]] | None:
    """The share of each stage's neurons VBP must have removed for ``ceil(ratio · all)`` neurons to save what the
    printed ``dense`` and ``pruned`` (params M, GMACs) rows differ by: ``(least, most)`` per stage over every split
    that fits within the printed precision, or ``None`` if none does. Differences of the printed rows, so that an
    offset the paper's counter adds to every count cancels.

    Three equations (the count, the params and the MACs saved) in one unknown per stage: with four stages the
    solutions form a segment, swept here along the last stage's count.
    """
    total = sum(s.neurons for s in stage_list)
    k = math.ceil(ratio * total - 1e-9)
    saved = [(float(d) - float(p)) * scale for d, p, scale in zip(dense, pruned, (1e6, 1e9))]
    # Each printed value is off by up to half its last digit, so the difference by up to twice that.
    tolerance = [10**-len(p.partition(".")[2]) * scale for p, scale in zip(pruned, (1e6, 1e9))]
    *first, last = stage_list
    matrix = np.array([[1.0] * len(first), [s.neuron_params for s in first], [s.neuron_macs for s in first]])
    shares = []
    for n_last in np.linspace(0, last.neurons, steps):
        for dp, dm in itertools.product((-1, 0, 1), repeat=2):  # the corners and middle of the rounding box
            rhs = np.array([k - n_last, saved[0] + dp * tolerance[0] - last.neuron_params * n_last,
                            saved[1] + dm * tolerance[1] - last.neuron_macs * n_last])
            counts = np.linalg.solve(matrix, rhs)
            if all(-0.5 <= c <= s.neurons + 0.5 for c, s in zip(counts, first)):
                shares.append([c / s.neurons for c, s in zip(counts, first)] + [n_last / last.neurons])
    if not shares:
        return None
    array = np.clip(np.array(shares), 0.0, 1.0)
    return list(zip(array.min(axis=0).tolist(), array.max(axis=0).tolist()))
