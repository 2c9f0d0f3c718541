"""HetDPT's two motivating measurements: gradient disparity (paper Fig. 4) and recovery asymmetry (Fig. 5).

Both compare the two kinds of layer HetDPT prunes, attention sublayers and MLP activations, and
both argue against ranking them with one score: the mask gradients of activations dwarf those
of attention, and removing an activation costs far more accuracy at once than after a short
fine-tune. Neither function changes the model it is given.

Results are plain JSON-ready dicts. Blocks are keyed by their index as a string (``"3"``), so a
result survives a JSON round trip unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from vitprune.data import build_loader
from vitprune.errors import VitpruneError
from vitprune.surgery import add_depth_gates, check_depth_layers, prune_depth, remaining_layers
from vitprune.training import TrainConfig, Trainer, evaluate
from vitprune.training.progress import progress_bar, track_batches

#: The prunable layer types, named as :func:`~vitprune.surgery.prune_depth` names its arguments.
LAYER_TYPES: tuple[str, ...] = ("attention", "activation")


def gradient_disparity(
    model: nn.Module, loader: Iterable[tuple[torch.Tensor, torch.Tensor]], *, identity: str = "norm",
    max_batches: int | None = None, progress: bool = False,
) -> dict[str, Any]:
    """The loss gradient with respect to every layer's mask, all masks at 1 (HetDPT Fig. 4).

    A gated copy of ``model`` (:func:`~vitprune.surgery.add_depth_gates` with ``identity``) runs in
    eval mode, so without dropout or drop-path, over ``loader`` (its first ``max_batches`` batches).
    With ``ℓ`` a batch's mean cross-entropy and ``δ`` its gradient at a layer's output, the gated
    layer ``m * f(u) + (1 - m) * identity(u)`` has ``dℓ/dm = Σ δ ⊙ (f(u) - identity(u))``, where
    ``identity(u)`` is ``u``, or 0 for attention under ``identity="skip"``. A layer's ``mean_abs``
    is the mean over batches of ``|dℓ/dm|``, and ``mean`` that of the signed ``dℓ/dm``.

    Returns ``{"attention": {block: {"mean_abs", "mean"}}, "activation": {...}, "identity",
    "batches", "images", "summary"}``; ``summary`` holds each type's ``mean_abs`` averaged over its
    layers and ``ratio``, activation over attention (``None`` when a type has no layer left).
    """
    work = copy.deepcopy(model).eval()
    device = next(work.parameters()).device
    # Only the masks' gradients are wanted: frozen weights spare every weight-gradient computation.
    work.requires_grad_(False)
    gates = add_depth_gates(work, identity=identity)
    layers = [(kind, index, gate) for kind in LAYER_TYPES for index, gate in getattr(gates, kind).items()]
    if not layers:
        raise VitpruneError("the model has no attention or activation layer left to measure")
    importances = [gate.importance for _, _, gate in layers]
    abs_sum = torch.zeros(len(layers), dtype=torch.float64)
    signed_sum = torch.zeros(len(layers), dtype=torch.float64)
    batches = images = 0
    with torch.enable_grad():
        for inputs, targets in track_batches(loader, "mask gradients", max_batches=max_batches, enabled=progress):
            loss = F.cross_entropy(work(inputs.to(device)), targets.to(device))
            grads = torch.stack(torch.autograd.grad(loss, importances)).detach().to("cpu", torch.float64)
            abs_sum += grads.abs()
            signed_sum += grads
            batches += 1
            images += len(targets)
    if batches == 0:
        raise VitpruneError("the loader yielded no batch to measure")
    result: dict[str, Any] = {kind: {} for kind in LAYER_TYPES}
    for (kind, index, _), mean_abs, mean in zip(layers, (abs_sum / batches).tolist(), (signed_sum / batches).tolist()):
        result[kind][str(index)] = {"mean_abs": mean_abs, "mean": mean}
    attention = _mean([v["mean_abs"] for v in result["attention"].values()])
    activation = _mean([v["mean_abs"] for v in result["activation"].values()])
    ratio = activation / attention if attention and activation is not None else None
    summary = {"attention_mean_abs": attention, "activation_mean_abs": activation, "ratio": ratio}
    return {**result, "identity": identity, "batches": batches, "images": images, "summary": summary}


def recovery_asymmetry(
    model: nn.Module, train_set: Dataset, val_set: Dataset, *, config: TrainConfig,
    layers: Sequence[tuple[str, int]] | None = None, identity: str = "norm",
    device: torch.device | str | None = None, progress: bool = False,
) -> dict[str, Any]:
    """Top-1 on ``val_set`` after removing one layer alone, right away and after a short fine-tune (HetDPT Fig. 5).

    Each of ``layers`` (``(type, block)`` pairs, ``type`` in :data:`LAYER_TYPES`; default: every
    layer the model still has, attention first) is removed from its own copy of ``model`` with
    :func:`~vitprune.surgery.prune_depth` (``identity`` for attention), evaluated, fine-tuned on
    ``train_set`` with a :class:`~vitprune.training.Trainer` under ``config`` and evaluated again.
    Every evaluation uses batches of ``config.batch_size``; ``device`` defaults to the model's.

    Returns ``{"dense_top1", "identity", "layers": [{"type", "block", "top1_pruned",
    "top1_finetuned"}], "config"}`` with ``config`` as a dict.
    """
    config.validate()
    layers = _check_layers(model, layers)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    dense = copy.deepcopy(model).to(device)
    val_loader = build_loader(val_set, config.batch_size, shuffle=False, seed=0)
    rows = []
    with progress_bar(progress) as bar:
        task = bar.add_task("dense model", total=len(layers) + 1, stats="")
        dense_top1 = evaluate(dense, val_loader)["top1"]
        bar.update(task, advance=1, stats=f"dense top-1 {dense_top1:.3f}")
        for kind, block in layers:
            bar.update(task, description=f"{kind} {block}")
            pruned = copy.deepcopy(dense)
            prune_depth(pruned, **{kind: [block]}, identity=identity)
            top1_pruned = evaluate(pruned, val_loader)["top1"]
            # No run directory: the fine-tuned copies are measured, then thrown away.
            Trainer(pruned, train_set, config, device=device).fit()
            top1_finetuned = evaluate(pruned, val_loader)["top1"]
            rows.append({"type": kind, "block": block, "top1_pruned": top1_pruned, "top1_finetuned": top1_finetuned})
            bar.update(task, advance=1, stats=f"{kind} {block}: {top1_pruned:.3f} -> {top1_finetuned:.3f}")
    return {"dense_top1": dense_top1, "identity": identity, "layers": rows, "config": asdict(config)}


def _check_layers(model: nn.Module, layers: Sequence[tuple[str, int]] | None) -> list[tuple[str, int]]:
    """``layers`` as ``(type, block)`` pairs the model still has, each named once; by default all of them."""
    if layers is None:
        return [(kind, block) for kind, blocks in remaining_layers(model).items() for block in blocks]
    layers = [(kind, int(block)) for kind, block in layers]
    unknown = [kind for kind, _ in layers if kind not in LAYER_TYPES]
    if unknown:
        raise VitpruneError(f"unknown layer type {unknown[0]!r} (choose from: {', '.join(LAYER_TYPES)})")
    # Checked before any fine-tuning starts, so a bad list fails at once.
    check_depth_layers(model, *([block for k, block in layers if k == kind] for kind in LAYER_TYPES))
    return layers


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
