"""HetDPT Stage 1 Step 2: which layers to remove, by learnable importance within each type.

Every attention sublayer and activation is gated (:func:`~vitprune.surgery.add_depth_gates`); the
weights and one scalar importance per layer train together, the importance receiving its mask's
gradient through the straight-through estimator (Eq. 6). With plain SGD it would accumulate
``-dloss/dmask``, how much the loss would rise without the layer. The paper's code (and this
library) trains it with the weights' AdamW, whose normalised step moves a scalar by about the learning
rate whatever the gradient's size: the score becomes a learning-rate-weighted count of the steps on
which the layer's gradient said "keep", so Step 2 needs enough steps before its first removal for
that count to separate the layers. At each milestone the least important remaining
layer *of the type whose turn it is* is masked out, types interleaved, until the split chosen in
Step 1 is reached. Scores are never compared across types (the paper's Challenge 1), except in
the cross-type baseline :func:`select_layers_across_types` kept for the ablation.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from vitprune.errors import VitpruneError
from vitprune.methods.hetdpt.analysis import LAYER_TYPES
from vitprune.surgery import DepthGates, add_depth_gates, remaining_layers
from vitprune.training import TrainConfig, Trainer, TrainHooks
from vitprune.training.distributed import DistContext


@dataclass
class Selection:
    """The layers Step 2 chose, when each went, and the gated, trained copy it chose them on."""

    attention: list[int]
    activation: list[int]
    #: One entry per removal: ``{"step", "type", "block", "scores"}``, ``scores`` being the importance of
    #: every layer it was chosen from (``"attention:3"``-style keys), the chosen one the lowest.
    history: list[dict[str, Any]] = field(default_factory=list)
    #: Final importance of every gated layer, by type and block (as strings, JSON-ready).
    importance: dict[str, dict[str, float]] = field(default_factory=dict)
    model: nn.Module | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (without the model)."""
        return {"attention": self.attention, "activation": self.activation, "history": self.history,
                "importance": self.importance}


def interleaved_order(attention: int, activation: int) -> list[str]:
    """Types in removal order: alternating, starting with the type with more to remove (the reference code's)."""
    first, second = ("attention", "activation") if attention > activation else ("activation", "attention")
    counts = {"attention": attention, "activation": activation}
    order = []
    while counts[first] or counts[second]:
        for kind in (first, second):
            if counts[kind]:
                order.append(kind)
                counts[kind] -= 1
    return order


def default_milestones(removals: int, total_steps: int, prune_fraction: float = 0.5,
                       warmup_steps: int = 0) -> list[int]:
    """Steps at which to remove a layer: evenly over the first ``prune_fraction`` of the run after its
    ``warmup_steps`` (no layer goes while the learning rate is still warming up), at step 1 or later."""
    if not 0 < prune_fraction <= 1:
        raise VitpruneError(f"prune_fraction must be in (0, 1], got {prune_fraction}")
    span = max(0, total_steps - warmup_steps) * prune_fraction
    return [max(1, warmup_steps + round(span * (i + 1) / removals)) for i in range(removals)]


def shortlist_size(share: float, layers: int, removing: int) -> int:
    """How many of a type's ``layers`` Step 2 chooses among when it removes ``removing`` of them: ``share`` of them,
    rounded (the reference code's candidate lists hold 8 of 12 blocks per type: ``share`` 2/3), but at least the
    ``removing`` it must find there and at most all of them."""
    if not 0 < share <= 1:
        raise VitpruneError(f"the shortlist share must be in (0, 1], got {share}")
    return min(layers, max(removing, round(share * layers)))


class _ProgressiveRemoval(TrainHooks):
    """Masks out one layer at each milestone step; ``pick`` says which."""

    def __init__(self, gates: DepthGates, order: list[str | None], milestones: list[int] | None,
                 prune_fraction: float, pick: Callable[[str | None], list[tuple[str, int]]]) -> None:
        self.gates, self.order, self.milestones = gates, order, milestones
        self.prune_fraction, self.pick = prune_fraction, pick
        self.history: list[dict[str, Any]] = []

    def on_step_start(self, trainer: Trainer) -> None:
        if self.milestones is None:
            config, per_epoch = trainer.config, trainer.steps_per_epoch
            self.milestones = default_milestones(len(self.order), config.epochs * per_epoch, self.prune_fraction,
                                                 warmup_steps=round(config.warmup_epochs * per_epoch))
        while len(self.history) < len(self.order) and trainer.step >= self.milestones[len(self.history)]:
            self.remove(trainer.step)

    def remove(self, step: int) -> None:
        turn = self.order[len(self.history)]
        layers = self.pick(turn)
        if not layers:
            raise VitpruneError(f"no {turn or 'layer'} left among the candidates to remove")
        scores = {f"{kind}:{b}": getattr(self.gates, kind)[b].importance.item() for kind, b in layers}
        # Ties (e.g. before any step) go to the earliest listed layer, so the choice is deterministic.
        kind, block = min(layers, key=lambda layer: scores[f"{layer[0]}:{layer[1]}"])
        getattr(self.gates, kind)[block].set(False)
        self.history.append({"step": step, "type": kind, "block": block, "scores": scores})

    def state_dict(self) -> dict[str, Any]:
        # The masks are buffers of the model, saved with its weights; the removals' record is not.
        return {"order": self.order, "history": self.history}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["order"] != self.order:
            raise VitpruneError(f"cannot resume the layer search: its checkpoint removes {_removals(state['order'])}, "
                                f"this run {_removals(self.order)}")
        self.history = state["history"]


def _removals(order: list[str | None]) -> str:
    """``order`` in words: ``2 attention + 1 activation layers``, or ``3 layers`` of either type."""
    if None in order:
        return f"{len(order)} layers"
    return " + ".join(f"{order.count(kind)} {kind}" for kind in LAYER_TYPES) + " layers"


def _remaining(gates: DepthGates, kind: str, candidates: dict[str, Sequence[int]] | None) -> list[int]:
    pool = getattr(gates, kind)
    allowed = pool if candidates is None or kind not in candidates else [b for b in candidates[kind] if b in pool]
    return [b for b in allowed if pool[b].kept]


def _run(model: nn.Module, train_set: Dataset, config: TrainConfig, order: list[str | None],
         pick_from: Callable[[DepthGates, str | None], list[tuple[str, int]]], *, identity: str, output_gelu: bool,
         milestones: list[int] | None, prune_fraction: float, device: torch.device | str | None,
         on_batch: Callable | None, dist: DistContext | None, run_dir: str | Path | None = None,
         resume: bool = False) -> Selection:
    if milestones is not None and (len(milestones) != len(order) or list(milestones) != sorted(milestones)):
        raise VitpruneError(f"give {len(order)} milestones in increasing order, got {list(milestones)}")
    work = copy.deepcopy(model)
    gates = add_depth_gates(work, identity=identity, output_gelu=output_gelu)
    hooks = _ProgressiveRemoval(gates, order, list(milestones) if milestones else None, prune_fraction,
                                lambda turn: pick_from(gates, turn))
    trainer = Trainer(work, train_set, config, run_dir=run_dir, hooks=hooks, device=device, dist=dist)
    trainer.fit(resume=resume, on_batch=on_batch)
    while len(hooks.history) < len(order):  # milestones past the last step: remove the rest at the end
        hooks.remove(trainer.step)
    importance = {kind: {str(b): v for b, v in scores.items()} for kind, scores in gates.importance().items()}
    attention, activation = gates.removed()
    return Selection(attention=attention, activation=activation, history=hooks.history, importance=importance,
                     model=work)


def select_layers(model: nn.Module, train_set: Dataset, config: TrainConfig, *, attention: int, activation: int,
                  candidates: dict[str, Sequence[int]] | None = None, identity: str = "norm",
                  output_gelu: bool = False, milestones: list[int] | None = None, prune_fraction: float = 0.5,
                  device: torch.device | str | None = None, on_batch: Callable | None = None,
                  dist: DistContext | None = None, run_dir: str | Path | None = None,
                  resume: bool = False) -> Selection:
    """Train a gated copy of ``model`` and remove ``attention`` + ``activation`` layers by within-type importance.

    Removals interleave the types (:func:`interleaved_order`) at ``milestones`` (optimisation steps;
    default :func:`default_milestones`). ``candidates`` restricts a type to a shortlist (e.g. the
    lowest-TE layers, :func:`shortlist_size` of them), as the reference code does. ``identity`` and
    ``output_gelu`` are :func:`~vitprune.surgery.add_depth_gates`'s: the gated copy computes what
    :func:`~vitprune.surgery.prune_depth` with them would build, so the search trains the function
    the pruned model has. The caller's model is not changed; the returned :class:`Selection` holds
    the trained, gated copy. ``run_dir`` keeps the training's checkpoints (with the removals so far), from which
    ``resume`` continues to the same choice and weights as an uninterrupted search.

    Under torchrun (``dist``) the training is data-parallel: the importance scores are parameters of
    the gated copy, so DDP averages their gradients with the weights', every process holds the same
    scores, and every process removes the same layers at the same steps.
    """
    available = {kind: len(blocks) for kind, blocks in remaining_layers(model).items()}
    for kind, wanted in (("attention", attention), ("activation", activation)):
        limit = available[kind] if candidates is None or kind not in candidates else len(candidates[kind])
        if not 0 <= wanted <= limit:
            raise VitpruneError(f"cannot remove {wanted} {kind} layers: the model has {limit} to choose from")

    def pick_from(gates: DepthGates, turn: str | None) -> list[tuple[str, int]]:
        return [(turn, b) for b in _remaining(gates, turn, candidates)]

    return _run(model, train_set, config, interleaved_order(attention, activation), pick_from, identity=identity,
                output_gelu=output_gelu, milestones=milestones, prune_fraction=prune_fraction, device=device,
                on_batch=on_batch, dist=dist, run_dir=run_dir, resume=resume)


def select_layers_across_types(model: nn.Module, train_set: Dataset, config: TrainConfig, *, budget: int,
                               identity: str = "norm", output_gelu: bool = False, milestones: list[int] | None = None,
                               prune_fraction: float = 0.5, device: torch.device | str | None = None,
                               on_batch: Callable | None = None, dist: DistContext | None = None) -> Selection:
    """Baseline without Step 1: remove ``budget`` layers, each time the lowest importance of *either* type.

    This is the comparison HetDPT argues against (paper App. D, Table 11): gradient scales differ
    between the types, so the split it lands on is an artefact of that disparity. The other
    arguments are :func:`select_layers`'.
    """
    total = sum(len(blocks) for blocks in remaining_layers(model).values())
    if not 1 <= budget <= total:
        raise VitpruneError(f"the budget must be between 1 and the {total} layers the model has, got {budget}")

    def pick_from(gates: DepthGates, _turn: str | None) -> list[tuple[str, int]]:
        return [(kind, b) for kind in LAYER_TYPES for b in _remaining(gates, kind, None)]

    return _run(model, train_set, config, [None] * budget, pick_from, identity=identity, output_gelu=output_gelu,
                milestones=milestones, prune_fraction=prune_fraction, device=device, on_batch=on_batch, dist=dist)
