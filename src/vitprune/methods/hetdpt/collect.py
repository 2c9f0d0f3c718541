"""Training data for HetDPT's model accuracy predictor (MAP): the prune → fine-tune → evaluate sweeps.

Each point pairs a structure with the validation accuracy it recovers after a fast fine-tune.
Three sweeps start from the given (dense) model, each removing one layer more per round and
inheriting the previous round's fine-tuned weights:

* Algorithm 1 along attention, then along activation: one more layer of that type per round;
* Algorithm 2: rounds of one layer of each type, interleaved.

Within a type the layer removed is the one of minimal transfer entropy
(:func:`~vitprune.methods.hetdpt.entropy.transfer_entropy`) on a fixed class-balanced subset of
the training data, without augmentation (``te_set``), measured again on the current model each
round as the algorithms say, or (``te_once``, a cheaper reading for small budgets) ranked once on
the starting model, each sweep removing its type's layers in that order: the paper's TE-Static
ranking, which costs one TE pass per type instead of one per point. Algorithm 2 is written
attention-first, while the paper's DeiT-B data were collected activation-first; ``order``
chooses, and the default follows the pseudo-code.

Algorithm 2's first half-step, one layer of the first type, is the first round of Algorithm 1
along that type all over again: same model, same TE, same seeded fine-tune. So, as in the
paper's DeiT-B data (whose diagonal starts at one layer of each type), it is not recorded twice:
it is replayed from Algorithm 1's choice, and the sweep records ``2 * rounds - 1`` points. Only
when Algorithm 1 does not sweep that type is it measured and recorded.

Points are plain JSON-ready dicts: ``{"algorithm", "attention_removed", "activation_removed",
"a", "t", "top1"}``, ``algorithm`` one of :data:`POINT_ALGORITHMS`; the removed lists hold the
blocks this collection removed, in removal order; ``a`` and ``t`` are the retained attention and
activation ratios (remaining layers over blocks; layers the given model already lacked count as
removed there); ``top1`` is in percent.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from vitprune.adapters import get_adapter
from vitprune.data import build_loader
from vitprune.errors import VitpruneError
from vitprune.methods.hetdpt.analysis import LAYER_TYPES
from vitprune.methods.hetdpt.config import INTERLEAVED_ORDERS
from vitprune.methods.hetdpt.entropy import transfer_entropy
from vitprune.runs.stages import calibration_loader
from vitprune.surgery import ATTENTION_IDENTITIES, prune_depth, remaining_layers
from vitprune.training import TrainConfig, Trainer, evaluate
from vitprune.training.distributed import DistContext, on_main
from vitprune.training.progress import progress_bar

#: The ``algorithm`` of a point: the starting model, Algorithm 1 along one type, Algorithm 2.
POINT_ALGORITHMS: tuple[str, ...] = ("dense", "attention", "activation", "interleaved")


def collect_predictor_data(
    model: nn.Module, train_set: Dataset, val_set: Dataset, *, max_attention: int, max_activation: int,
    interleaved_rounds: int, finetune: TrainConfig, te_set: Dataset | None = None, te_images: int = 512,
    te_batch_size: int = 128, order: str = "attention-first", identity: str = "norm", output_gelu: bool = False,
    te_once: bool = False, device: torch.device | str | None = None,
    progress: bool = False, on_point: Callable[[list[dict[str, Any]]], None] | None = None,
    resume_points: Sequence[dict[str, Any]] | None = None, dist: DistContext | None = None,
) -> list[dict[str, Any]]:
    """MAP training points from Algorithms 1 and 2 (see the module docstring for their form).

    The points come in this order: the given model itself (evaluated without fine-tuning), then
    ``max_attention`` points of Algorithm 1 along attention, ``max_activation`` along activation,
    and ``2 * interleaved_rounds`` of Algorithm 2 (in ``order``, a key of
    :data:`INTERLEAVED_ORDERS`), one fewer when its first step repeats Algorithm 1's (see the
    module docstring). Each round finds the layer of minimal TE (ties: the lower block; ``te_once``:
    the next in the starting model's TE order, see the module docstring) on
    ``te_images`` class-balanced images of ``te_set`` (:func:`~vitprune.data.balanced_subset`, in
    batches of ``te_batch_size``; default ``train_set``, but TE should see the training images
    without augmentation: pass them with the evaluation transform), removes it with
    :func:`~vitprune.surgery.prune_depth` (``identity`` and ``output_gelu``, which TE's gated copy
    follows too; the MLP linears stay apart), fine-tunes on ``train_set`` under ``finetune`` and
    evaluates top-1 on ``val_set`` in batches of ``finetune.batch_size``. ``device`` defaults to
    the model's; the given model is not modified.

    ``on_point`` gets the points so far after each new one (to save progress). ``resume_points``
    are the points of an interrupted call with the same arguments: they are checked and kept, a
    finished sweep is skipped, and an unfinished one replays its recorded removals and fine-tunes
    (without TE or evaluation) to rebuild the weights it continues from. Every fine-tune starts
    from ``finetune.seed`` and the TE images are drawn once with that seed (augmentation
    included), so on the CPU a resumed call returns exactly the points of an uninterrupted one;
    on CUDA, nondeterministic kernels can make the replayed weights, and so later points, differ
    slightly. Like the :class:`~vitprune.training.Trainer` it runs, it reseeds the global RNGs.

    Under torchrun (``dist``; every process calls it with the same arguments) each process scores
    the layers on its share of the TE images (the entropies reduced over all of them), the fast
    fine-tunes are data-parallel, and rank 0 alone evaluates each point, the others receiving its
    top-1, so every process records the same points and removes the same layers. ``on_point`` runs
    on every process (write files on rank 0: :func:`~vitprune.training.distributed.on_main`).
    """
    finetune.validate()
    if order not in INTERLEAVED_ORDERS:
        raise VitpruneError(f"unknown interleaving order {order!r} (choose from: {', '.join(INTERLEAVED_ORDERS)})")
    if identity not in ATTENTION_IDENTITIES:
        raise VitpruneError(f"unknown attention identity {identity!r} "
                            f"(choose from: {', '.join(ATTENTION_IDENTITIES)})")
    if te_images < 2:
        raise VitpruneError(f"transfer entropy needs at least 2 images, got te_images={te_images}")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    start = copy.deepcopy(model).to(device).eval()
    remaining = remaining_layers(start)
    num_blocks = len(get_adapter(start).blocks())
    _check_counts(remaining, max_attention=max_attention, max_activation=max_activation,
                  interleaved_rounds=interleaved_rounds)
    sweeps = _sweeps(max_attention, max_activation, interleaved_rounds, order)
    points = _resumed(resume_points or [], sweeps, remaining, num_blocks, max_attention)
    te_batches = _te_batches(te_set if te_set is not None else train_set, te_images, te_batch_size, finetune.seed,
                             dist)
    val_loader = build_loader(val_set, finetune.batch_size, shuffle=False, seed=0)
    ranked: dict[str, list[int]] = {}

    def lowest(current: nn.Module, kind: str, removed: list[int]) -> int:
        """The block of ``kind`` this round removes: minimal TE now, or next in the starting model's order."""
        if not te_once:
            scores = transfer_entropy(current, kind, te_batches, identity=identity, output_gelu=output_gelu, dist=dist)
            return min(scores, key=lambda b: (scores[b], b))
        if kind not in ranked:
            scores = transfer_entropy(start, kind, te_batches, identity=identity, output_gelu=output_gelu, dist=dist)
            ranked[kind] = sorted(scores, key=lambda b: (scores[b], b))
        return next(block for block in ranked[kind] if block not in removed)

    with progress_bar(progress and (dist is None or dist.is_main)) as bar:
        total = 1 + sum(not shared for _, steps in sweeps for _, shared in steps)
        task = bar.add_task("dense model", total=total, completed=len(points), stats="")

        def record(algorithm: str, removed: dict[str, list[int]], evaluated: nn.Module) -> None:
            # Rank 0's figure for all: the next round's choice, and the predictor, must not differ between ranks.
            top1 = 100 * on_main(lambda: evaluate(evaluated, val_loader)["top1"])
            points.append({"algorithm": algorithm, **_structure(removed, remaining, num_blocks), "top1": top1})
            bar.update(task, advance=1, stats=f"a={points[-1]['a']:.2f} t={points[-1]['t']:.2f}: top-1 {top1:.2f}%")
            if on_point is not None:
                on_point(list(points))

        if not points:
            record("dense", {kind: [] for kind in LAYER_TYPES}, start)
        done = 1
        for algorithm, steps in sweeps:
            count = sum(not shared for _, shared in steps)
            recorded, done = points[done:done + count], done + count
            if len(recorded) == count:
                continue
            current = copy.deepcopy(start)
            removed: dict[str, list[int]] = {kind: [] for kind in LAYER_TYPES}
            replay = iter(recorded)
            for step, (kind, shared) in enumerate(steps):
                where = f"{algorithm} {step + 1}/{len(steps)}"
                point = None if shared else next(replay, None)
                if shared:
                    block = _first_removal(points, kind, max_attention)
                elif point is not None:
                    block = point[f"{kind}_removed"][-1]
                else:
                    bar.update(task, description=f"{where}: transfer entropy")
                    block = lowest(current, kind, removed[kind])
                bar.update(task, description=f"{where}: {kind} {block} removed, fine-tuning")
                prune_depth(current, **{kind: [block]}, identity=identity, output_gelu=output_gelu, merge=False)
                removed[kind].append(block)
                # No run directory: each round's weights live on only in the next round's model.
                Trainer(current, train_set, finetune, device=device, dist=dist).fit()
                if not shared and point is None:
                    record(algorithm, removed, current)
    return points


def _sweeps(max_attention: int, max_activation: int, interleaved_rounds: int,
            order: str) -> list[tuple[str, list[tuple[str, bool]]]]:
    """Each sweep's ``(algorithm, [(kind, shared), ...])``; a shared step replays Algorithm 1's first round."""
    first, second = INTERLEAVED_ORDERS[order]
    rounds = [(first, False), (second, False)] * interleaved_rounds
    if rounds and {"attention": max_attention, "activation": max_activation}[first]:
        rounds[0] = (first, True)
    return [("attention", [("attention", False)] * max_attention),
            ("activation", [("activation", False)] * max_activation), ("interleaved", rounds)]


def _first_removal(points: Sequence[dict[str, Any]], kind: str, max_attention: int) -> int:
    """The block Algorithm 1 removed first along ``kind`` (its first point follows the dense point)."""
    return points[1 if kind == "attention" else 1 + max_attention][f"{kind}_removed"][0]


def _check_counts(remaining: dict[str, list[int]], **counts: int) -> None:
    """Each sweep's number of rounds is at least 0 and at most the layers of its type(s) the model has."""
    available = {"max_attention": len(remaining["attention"]), "max_activation": len(remaining["activation"]),
                 "interleaved_rounds": min(len(remaining["attention"]), len(remaining["activation"]))}
    for name, count in counts.items():
        if count < 0:
            raise VitpruneError(f"{name} must be at least 0, got {count}")
        if count > available[name]:
            what = "of each type" if name == "interleaved_rounds" else name.removeprefix("max_")
            raise VitpruneError(f"{name}={count} but the model has only {available[name]} {what} layer(s) left")


def _resumed(points: Sequence[dict[str, Any]], sweeps: list[tuple[str, list[tuple[str, bool]]]],
             remaining: dict[str, list[int]], num_blocks: int, max_attention: int) -> list[dict[str, Any]]:
    """Copies of ``points``, checked to be the start of what this collection would record."""
    points = [dict(point) for point in points]
    total = 1 + sum(not shared for _, steps in sweeps for _, shared in steps)
    if len(points) > total:
        raise VitpruneError(f"cannot resume from {len(points)} points: these settings collect only {total}")
    if not points:
        return points
    _check_point(points, 0, "dense", {kind: [] for kind in LAYER_TYPES}, remaining, num_blocks)
    i = 1
    for algorithm, steps in sweeps:
        removed: dict[str, list[int]] = {kind: [] for kind in LAYER_TYPES}
        for kind, shared in steps:
            if i == len(points):
                return points
            if shared:
                block = _first_removal(points, kind, max_attention)
            else:
                listed = points[i].get(f"{kind}_removed")
                block = listed[-1] if isinstance(listed, list) and listed else None
                if block not in remaining[kind] or block in removed[kind]:
                    raise VitpruneError(f"resume point {i} does not continue this collection: it should remove one "
                                        f"more {kind} layer of {remaining[kind]} beyond {removed[kind]}")
            removed[kind].append(block)
            if not shared:
                _check_point(points, i, algorithm, removed, remaining, num_blocks)
                i += 1
    return points


def _check_point(points: list[dict[str, Any]], i: int, algorithm: str, removed: dict[str, list[int]],
                 remaining: dict[str, list[int]], num_blocks: int) -> None:
    """Point ``i`` has the algorithm and structure expected of it, and a numeric top-1."""
    want = {"algorithm": algorithm, **_structure(removed, remaining, num_blocks)}
    wrong = [key for key, value in want.items() if points[i].get(key) != value]
    if wrong or not isinstance(points[i].get("top1"), (int, float)):
        raise VitpruneError(f"resume point {i} does not continue this collection: "
                            f"{', '.join(wrong) or 'top1'} differ(s) from {want}")


def _structure(removed: dict[str, list[int]], remaining: dict[str, list[int]], num_blocks: int) -> dict[str, Any]:
    """The structural fields of a point: removed blocks, retained attention and activation ratios."""
    return {"attention_removed": list(removed["attention"]), "activation_removed": list(removed["activation"]),
            "a": (len(remaining["attention"]) - len(removed["attention"])) / num_blocks,
            "t": (len(remaining["activation"]) - len(removed["activation"])) / num_blocks}


def _te_batches(dataset: Dataset, size: int, batch_size: int, seed: int,
                dist: DistContext | None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The class-balanced TE images (this process's share of them), read once, so every round scores layers on the
    same ones."""
    loader = calibration_loader(dataset, size, batch_size, seed, dist=dist)
    # Seeded as the Trainer seeds every fine-tune, so augmented images (no te_set given) are the same in a resumed run.
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    return list(loader)
