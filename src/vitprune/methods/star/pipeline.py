"""The STAR pipeline: ACS schedule, LRP prior, token-pruning blocks, optional fine-tuning, report.

Each stage writes what it decided into the run directory before the next starts, so an
interrupted run picks up where it stopped (``resume``):

    run_dir/acs.json               average cosine similarity of every block's output tokens
    run_dir/inter.safetensors      the inter-layer prior S_inter (blocks x patch positions)
    run_dir/schedule.json          rho (given or found for a MAC target) and the per-block keep rates
    run_dir/finetune/              the fine-tuning run (checkpoints, metrics.jsonl)
    run_dir/model/                 the token-pruned (and fine-tuned) model: recipe + weights
    run_dir/report.json            top-1 before/after, params, MACs (both conventions), speed, seconds
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from vitprune.adapters import get_adapter
from vitprune.atomic import read_json, write_json
from vitprune.config import json_ready
from vitprune.data import build_loader
from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.measure import count_macs
from vitprune.methods.star.config import LRP_SETTINGS, WITHOUT_LRP, STARConfig
from vitprune.methods.star.lrp import check_lrp, inter_layer_scores
from vitprune.methods.star.schedule import (
    apply_keep_rates,
    average_cosine_similarity,
    check_reachable,
    keep_rates,
    rho_for_macs,
)
from vitprune.recipe import RUN_MODEL_DIR
from vitprune.runs.context import MethodData, RunContext, method_run
from vitprune.runs.report import REPORT_FILE, RunReport  # noqa: F401  (REPORT_FILE: the run directory's layout)
from vitprune.runs.stages import (
    available_images, cached, calibration_loader, finish_run, open_run, recover, retention, stage_tensors,
    tensor_origin,
)
from vitprune.training import evaluate
from vitprune.training.distributed import DistContext, on_main

ACS_FILE, INTER_FILE, SCHEDULE_FILE = "acs.json", "inter.safetensors", "schedule.json"
FINETUNE_DIR, MODEL_DIR = "finetune", RUN_MODEL_DIR


@dataclass
class STARReport(RunReport):
    """What :func:`run_star` did and measured; ``run_dir/report.json`` holds its :meth:`to_dict`."""

    #: Keep rate of the last block, given or found for the MAC target (``None``: hand-set rates).
    rho: float | None
    alpha: float
    adaptive: bool
    #: What each block keeps (1.0 for those that prune no token).
    keep_rates: list[float]
    #: Average cosine similarity per block (``None``: hand-set rates need none).
    acs: list[float] | None
    #: Each pruned top-1 as a share of the dense one (:func:`~vitprune.runs.stages.retention`); ``top1`` holds
    #: ``dense``, ``pruned`` (right after pruning) and, fine-tuned, ``finetuned`` and ``finetune_best``.
    retention: dict[str, float | None]
    config: dict[str, Any]


@method_run
def run_star(model: nn.Module, data: MethodData, config: STARConfig, ctx: RunContext) -> STARReport:
    """Token-prune a copy of ``model`` the STAR way, optionally fine-tune it; returns the report.

    The ACS and the LRP prior come from ``data.calibration`` (default ``data.train``; the CLI passes
    the training images with the evaluation transform). Accuracy is top-1 on ``data.val`` for the
    dense model, right after pruning and after fine-tuning (on ``data.train``). The model is saved to
    ``ctx.run_dir/model``. Under torchrun (``ctx.dist``) each process passes over its share of the
    calibration images, the statistics are reduced over all of them, and only rank 0 writes files.
    """
    get_adapter(model).require(*config.requires, by="STAR", without={"lrp": WITHOUT_LRP})
    config.validate()
    ctx.speed.validate()
    if config.target_macs is not None:
        check_reachable(model, config.target_macs)
    blocks = len(get_adapter(model).blocks())
    if config.rates is not None and len(config.rates) != blocks:
        raise VitpruneError(f"{len(config.rates)} keep rates for a model of {blocks} blocks")
    if config.alpha < 1:  # before the ACS pass, which would otherwise run (and be written) for nothing
        try:
            check_lrp(model)
        except UnsupportedArchitectureError as exc:
            raise UnsupportedArchitectureError(f"{exc}; {WITHOUT_LRP}") from None
    run_dir, device, stages = open_run(model, ctx, seed=config.seed)
    progress, resume, dist = ctx.progress, ctx.resume, ctx.dist
    calibration = data.calibration_or_train
    config = available_images(config, calibration, ("acs_images", "lrp_images"), ctx.log)

    def loader(images: int):
        return calibration_loader(calibration, images, config.calibration_batch, config.seed, dist=dist)

    val_loader = build_loader(data.val, config.calibration_batch, shuffle=False, seed=0)
    dense_top1 = stages.run("evaluate the dense model", lambda: evaluate(model, val_loader)["top1"])
    acs, rho, rates = None, config.rho, config.rates
    if rates is None:
        acs = stages.run("average cosine similarity", lambda: _cached_json(
            run_dir / ACS_FILE, resume, lambda: average_cosine_similarity(
                model, loader(config.acs_images), max_images=config.acs_images, progress=progress, dist=dist)))
        if rho is None:
            rho = stages.run("find rho for the MAC target", lambda: rho_for_macs(model, acs, config.target_macs,
                                                                               anchor=config.anchor,
                                                                               above=config.above))
        rates = keep_rates(acs, rho, anchor=config.anchor)
    prior = None
    if config.alpha < 1:
        prior = stages.run("inter-layer importance (LRP)", lambda: _inter(
            model, loader(config.lrp_images), config, run_dir / INTER_FILE, progress, resume, dist))
    pruned = copy.deepcopy(model)
    apply_keep_rates(pruned, rates, alpha=config.alpha, prior=prior, adaptive=config.adaptive)
    # What the blocks do: those without an attention head keep every token whatever the schedule gave them.
    rates = [view.token_op.keep_rate if view.token_op is not None else 1.0 for view in get_adapter(pruned).blocks()]
    on_main(lambda: write_json(run_dir / SCHEDULE_FILE, {
        "rho": rho, "anchor": config.anchor, "keep_rates": rates, "target_macs": json_ready(config.target_macs),
        "hand_set": config.rates is not None}))
    top1 = {"dense": dense_top1, **recover(
        stages, pruned, model, data.train, val_loader, config.finetune, val_set=data.val, distill=config.distill,
        alpha=config.distill_alpha, tau=config.tau, run_dir=run_dir / FINETUNE_DIR, device=device,
        progress=progress, resume=resume, dist=dist)}
    summary = {"rho": rho, "alpha": config.alpha, "adaptive": config.adaptive, "keep_rates": rates}
    return finish_run(STARReport, pruned, model, ctx, stages=stages, device=device, top1=top1,
                      metadata={"star": summary},
                      footprint=_footprint(pruned, data.val, config), **summary, acs=acs, retention=retention(top1),
                      config=config.to_dict())


def _footprint(pruned: nn.Module, val_set: Dataset, config: STARConfig) -> dict[str, Any]:
    """Params and MACs; a-STAR's MACs depend on the image, so they are the mean over ``mac_images`` images."""
    if not config.adaptive:
        return count_macs(pruned).totals()
    images = [val_set[i][0] for i in range(min(config.mac_images, len(val_set)))]
    param = next(pruned.parameters())
    counts = [count_macs(pruned, image=img.to(param.device, param.dtype)).totals() for img in images]
    return {"params": counts[0]["params"], **{k: statistics.mean(c[k] for c in counts)
                                              for k in ("macs_full", "macs_linear")},
            "macs_averaged_over_images": len(counts)}


def _cached_json(path: Path, resume: bool, compute: Callable[[], Any]) -> Any:
    return cached(path, resume, lambda: read_json(path), compute, lambda value: write_json(path, value))


def _inter(model: nn.Module, loader, config: STARConfig, path: Path, progress: bool, resume: bool,
           dist: DistContext | None) -> torch.Tensor:
    def compute() -> dict[str, torch.Tensor]:
        return {"inter": inter_layer_scores(model, loader, classes=config.classes, max_images=config.lrp_images,
                                            progress=progress, dist=dist).float()}

    def origin() -> dict[str, str]:
        return tensor_origin(model, **{name: getattr(config, name) for name in LRP_SETTINGS})

    tensors = stage_tensors(path, resume, config.prior, origin, compute, "an LRP prior", "prior")
    if "inter" not in tensors:
        raise VitpruneError(f"{path} holds no LRP prior; delete it to recompute the prior")
    return tensors["inter"]
