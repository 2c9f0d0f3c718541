"""The VBP pipeline: statistics, global selection, mean-shift compensation, optional fine-tuning, report.

Each stage writes what it decided into the run directory before the next starts, so an
interrupted run picks up where it stopped (``resume``) and the statistics pass (one epoch of the
training set in the paper) is never redone:

    run_dir/statistics.safetensors  post-activation count, mean and variance of every MLP neuron
    run_dir/selection.json          criterion, ratio and the removed neurons of each block
    run_dir/finetune/               the fine-tuning run (checkpoints, metrics.jsonl)
    run_dir/model/                  the pruned (and fine-tuned) model: recipe + weights
    run_dir/report.json             top-1 before/after, params, MACs (both conventions), speed, seconds
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.atomic import atomic_file, read_json, write_json
from vitprune.config import json_ready
from vitprune.data import build_loader
from vitprune.errors import UnreachableTargetError, VitpruneError
from vitprune.measure.target import goal
from vitprune.methods.vbp.config import REQUIRES, STATISTICS_SETTINGS, VBPConfig
from vitprune.methods.vbp.criteria import neuron_scores
from vitprune.methods.vbp.selection import prune_by_selection, removal_count, select_for_macs, select_neurons
from vitprune.methods.vbp.statistics import NeuronStats, hidden_mlps, mlp_statistics
from vitprune.recipe import RUN_MODEL_DIR
from vitprune.runs.context import MethodData, RunContext, method_run
from vitprune.runs.report import REPORT_FILE, RunReport  # noqa: F401  (REPORT_FILE: the run directory's layout)
from vitprune.runs.stages import (
    available_images, cached, calibration_loader, finish_run, open_run, recover, retention, stage_tensors,
    tensor_origin,
)
from vitprune.training import evaluate
from vitprune.training.distributed import DistContext, broadcast_object

STATISTICS_FILE, SELECTION_FILE = "statistics.safetensors", "selection.json"
FINETUNE_DIR, MODEL_DIR = "finetune", RUN_MODEL_DIR


@dataclass
class VBPReport(RunReport):
    """What :func:`run_vbp` did and measured; ``run_dir/report.json`` holds its :meth:`to_dict`."""

    #: The ratio asked for, or (to a MAC target) the share of the neurons removed.
    ratio: float
    criterion: str
    compensate: bool
    #: MLP hidden neurons removed, in all.
    removed: int
    #: MLP hidden width per block (block index as a string), after pruning and before.
    widths: dict[str, int]
    widths_dense: dict[str, int]
    #: Each pruned top-1 as a share of the dense one (:func:`~vitprune.runs.stages.retention`); ``top1`` holds
    #: ``dense``, ``pruned`` (right after pruning) and, fine-tuned, ``finetuned`` and ``finetune_best``.
    retention: dict[str, float | None]
    config: dict[str, Any]


@method_run
def run_vbp(model: nn.Module, data: MethodData, config: VBPConfig, ctx: RunContext) -> VBPReport:
    """Prune a copy of ``model`` the VBP way (or by a baseline criterion), optionally fine-tune it; returns the report.

    Statistics and scores come from ``data.calibration`` (default ``data.train``; the CLI passes the
    training images with the evaluation transform). Accuracy is top-1 on ``data.val`` for the dense
    model, right after pruning (the paper's retention) and after fine-tuning (on ``data.train``). The
    model is saved to ``ctx.run_dir/model``. With ``ctx.resume``, stages found in the run directory are
    reused and fine-tuning continues from its checkpoint; without it, a run directory holding a previous
    run is an error. Under torchrun (``ctx.dist``) each process passes over its share of the calibration
    images, the statistics and scores are reduced over all of them, the fine-tune is data-parallel, and
    rank 0 alone writes the files (on resume it reads them and sends them to the others).
    """
    get_adapter(model, needs=REQUIRES, by="VBP")
    config.validate()
    ctx.speed.validate()
    if config.target_macs is not None:  # before the statistics pass: a target at or above the model's MACs
        goal(config.target_macs, model)
        if all(view.mlp.merged for view in get_adapter(model).blocks()):
            raise UnreachableTargetError("no MLP has hidden neurons left to remove toward the MAC target")
    widths = [v.mlp.hidden_features for v in hidden_mlps(model)]
    if config.ratio is not None and removal_count(widths, config.ratio, rounding=config.rounding,
                                                  min_width=config.min_width) == sum(widths):
        raise VitpruneError(f"a ratio of {config.ratio:g} removes all {sum(widths)} MLP neurons of the network, which "
                            "leaves every MLP a constant; choose a lower ratio (whole MLPs go with `vitprune prune "
                            "depth`)")
    run_dir, device, stages = open_run(model, ctx, seed=config.seed)
    progress, resume, dist = ctx.progress, ctx.resume, ctx.dist
    stage = stages.run
    calibration_set = data.calibration_or_train
    config = available_images(config, calibration_set, ("calibration_images",), ctx.log)

    val_loader = build_loader(data.val, config.calibration_batch, shuffle=False, seed=0)
    dense_top1 = stage("evaluate the dense model", lambda: evaluate(model, val_loader)["top1"])
    loader = calibration_loader(calibration_set, config.calibration_images, config.calibration_batch, config.seed,
                                dist=dist)

    stats = None
    if config.needs_statistics:
        stats = stage("activation statistics", lambda: _statistics(
            model, loader, config, run_dir / STATISTICS_FILE, progress, resume, dist))
    removed = stage(f"select neurons ({config.criterion})", lambda: _select(
        model, loader, stats, config, run_dir, progress, resume, dist))

    pruned = copy.deepcopy(model)
    prune_by_selection(pruned, removed, stats if config.compensate else None)
    top1 = {"dense": dense_top1, **recover(
        stages, pruned, model, data.train, val_loader, config.finetune, val_set=data.val, distill=config.distill,
        alpha=config.alpha, tau=config.tau, run_dir=run_dir / FINETUNE_DIR, device=device, progress=progress,
        resume=resume, dist=dist)}
    count = sum(map(len, removed.values()))
    summary = {"ratio": config.ratio if config.ratio is not None else count / sum(widths),
               "criterion": config.criterion, "compensate": config.compensate,
               "removed": count}
    widths = {name: {str(v.index): v.mlp.hidden_features for v in hidden_mlps(m)}
              for name, m in (("dense", model), ("pruned", pruned))}
    return finish_run(VBPReport, pruned, model, ctx, stages=stages, device=device, top1=top1,
                      metadata={"vbp": summary}, **summary, widths=widths["pruned"],
                      widths_dense=widths["dense"], retention=retention(top1), config=config.to_dict())


def _statistics(model: nn.Module, loader, config: VBPConfig, path: Path, progress: bool, resume: bool,
                dist: DistContext | None) -> dict[int, NeuronStats]:
    def compute() -> dict[str, torch.Tensor]:
        return _as_tensors(mlp_statistics(model, loader, progress=progress, dist=dist))

    def origin() -> dict[str, str]:
        return tensor_origin(model, **{name: getattr(config, name) for name in STATISTICS_SETTINGS})

    tensors = stage_tensors(path, resume, config.statistics, origin, compute, "activation statistics", "statistics")
    return _as_statistics(tensors, path)


def _select(model: nn.Module, loader, stats: dict[int, NeuronStats] | None, config: VBPConfig, run_dir: Path,
            progress: bool, resume: bool, dist: DistContext | None) -> dict[int, list[int]]:
    path = run_dir / SELECTION_FILE
    decision = {"criterion": config.criterion, "ratio": config.ratio, "target_macs": json_ready(config.target_macs),
                "rounding": config.rounding,
                "min_width": config.min_width, "seed": config.seed}

    def read() -> dict[int, list[int]] | None:
        saved = read_json(path)
        if {k: saved.get(k) for k in decision} != decision:
            return None  # another criterion or ratio: select again
        return {int(b): neurons for b, neurons in saved["removed"].items()}

    def compute() -> dict[int, list[int]]:
        scores = neuron_scores(model, config.criterion, loader, stats=stats, seed=config.seed, progress=progress,
                               dist=dist)
        # Rank 0's choice everywhere: a last-bit difference in a reduced score must not split the architecture.
        if config.target_macs is not None:
            chosen = select_for_macs(model, scores, config.target_macs, min_width=config.min_width)
        else:
            chosen = select_neurons(scores, config.ratio, rounding=config.rounding, min_width=config.min_width)
        return broadcast_object(chosen)

    return cached(path, resume, read, compute, lambda removed: write_json(
        path, {**decision, "removed": {str(b): neurons for b, neurons in removed.items()}}))


def save_statistics(stats: dict[int, NeuronStats], path: str | Path) -> None:
    """Write neuron statistics to a safetensors file (atomically)."""
    with atomic_file(Path(path)) as tmp:
        save_file(_as_tensors(stats), str(tmp))


def load_statistics(path: str | Path) -> dict[int, NeuronStats]:
    """Read statistics written by :func:`save_statistics` (or by a run)."""
    try:
        tensors = load_file(str(path))
    except (OSError, SafetensorError) as exc:
        raise VitpruneError(f"cannot read statistics from {path}: {exc}; delete it to recompute them") from None
    return _as_statistics(tensors, path)


def _as_tensors(stats: dict[int, NeuronStats]) -> dict[str, torch.Tensor]:
    tensors = {}
    for block, s in stats.items():
        tensors |= {f"{block}.count": torch.tensor(s.count, dtype=torch.int64), f"{block}.mean": s.mean.cpu(),
                    f"{block}.var": s.var.cpu()}
    return tensors


def _as_statistics(tensors: dict[str, torch.Tensor], path: str | Path) -> dict[int, NeuronStats]:
    try:
        blocks = sorted({int(key.split(".")[0]) for key in tensors})
        return {b: NeuronStats(int(tensors[f"{b}.count"]), tensors[f"{b}.mean"], tensors[f"{b}.var"])
                for b in blocks}
    except (KeyError, ValueError) as exc:
        raise VitpruneError(f"cannot read statistics from {path}: {exc}; delete it to recompute them") from None
