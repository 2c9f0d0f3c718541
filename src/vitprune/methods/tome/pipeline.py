"""The ToMe pipeline: the merge schedule (given or found for a MAC target), the merging blocks, optional fine-tuning,
report.

    run_dir/schedule.json          r, inflect, the tokens merged in each block and those entering it
    run_dir/finetune/              the fine-tuning run, where there is one (checkpoints, metrics.jsonl)
    run_dir/model/                 the merging (and fine-tuned) model: recipe + weights
    run_dir/report.json            top-1 before/after, params, MACs (both conventions), speed, seconds
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from torch import nn

from vitprune.adapters import get_adapter
from vitprune.atomic import write_json
from vitprune.config import json_ready
from vitprune.data import build_loader
from vitprune.errors import UnsupportedArchitectureError
from vitprune.measure import count_macs
from vitprune.measure.target import goal
from vitprune.methods.tome.config import REQUIRES, ToMeConfig
from vitprune.methods.tome.schedule import apply_merging, r_for_macs, r_schedule
from vitprune.recipe import RUN_MODEL_DIR
from vitprune.runs.context import MethodData, RunContext, method_run
from vitprune.runs.report import REPORT_FILE, RunReport  # noqa: F401  (REPORT_FILE: the run directory's layout)
from vitprune.runs.stages import finish_run, open_run, recover, retention
from vitprune.surgery import token_ops, token_pruning_blocks
from vitprune.training import evaluate
from vitprune.training.distributed import on_main

SCHEDULE_FILE, FINETUNE_DIR, MODEL_DIR = "schedule.json", "finetune", RUN_MODEL_DIR


@dataclass
class ToMeReport(RunReport):
    """What :func:`run_tome` did and measured; ``run_dir/report.json`` holds its :meth:`to_dict`."""

    #: Tokens merged per block (the schedule's mean), given or found for the MAC target.
    r: int
    inflect: float
    proportional: bool
    #: Tokens each block merges (0 where it has no attention head) and the tokens entering each block.
    merged: list[int]
    tokens: list[int]
    #: Each top-1 as a share of the dense one (:func:`~vitprune.runs.stages.retention`).
    retention: dict[str, float | None]
    config: dict[str, Any]


@method_run
def run_tome(model: nn.Module, data: MethodData, config: ToMeConfig, ctx: RunContext) -> ToMeReport:
    """Make a copy of ``model`` merge tokens the ToMe way, optionally fine-tune it; returns the report.

    Accuracy is top-1 on ``data.val`` for the dense model, right after merging and after fine-tuning (on
    ``data.train``, where ``config.finetune`` asks for it). The model is saved to ``ctx.run_dir/model``.
    """
    adapter = get_adapter(model, needs=REQUIRES, by="ToMe")
    config.validate()
    ctx.speed.validate()
    if token_pruning_blocks(model):
        raise UnsupportedArchitectureError(f"blocks {sorted(token_pruning_blocks(model))} prune tokens (STAR): a "
                                           "merged token stands for no one patch position, which their prior and "
                                           "positions follow; merge tokens on a model without token pruning")
    if config.target_macs is not None:
        goal(config.target_macs, model)
    run_dir, device, stages = open_run(model, ctx, seed=config.seed)
    val_loader = build_loader(data.val, config.calibration_batch, shuffle=False, seed=0)
    dense_top1 = stages.run("evaluate the dense model", lambda: evaluate(model, val_loader)["top1"])
    r = config.r
    if r is None:
        r = stages.run("find r for the MAC target", lambda: r_for_macs(model, config.target_macs,
                                                                       inflect=config.inflect, above=config.above))
    pruned = copy.deepcopy(model)
    apply_merging(pruned, r_schedule(r, config.inflect, len(adapter.blocks())), proportional=config.proportional)
    tokens = [block.tokens for block in count_macs(pruned).blocks]
    # What each block merges: its r, up to half the non-prefix tokens entering it.
    ops = token_ops(pruned)
    merged = [ops[i].merged(n) if i in ops else 0 for i, n in enumerate(tokens)]
    on_main(lambda: write_json(run_dir / SCHEDULE_FILE, {
        "r": r, "inflect": config.inflect, "proportional": config.proportional, "merged": merged, "tokens": tokens,
        "target_macs": json_ready(config.target_macs)}))
    top1 = {"dense": dense_top1, **recover(
        stages, pruned, model, data.train, val_loader, config.finetune, val_set=data.val, distill=config.distill,
        alpha=config.alpha, tau=config.tau, run_dir=run_dir / FINETUNE_DIR, device=device, progress=ctx.progress,
        resume=ctx.resume, dist=ctx.dist)}
    summary = {"r": r, "inflect": config.inflect, "proportional": config.proportional, "merged": merged}
    return finish_run(ToMeReport, pruned, model, ctx, stages=stages, device=device, top1=top1,
                      metadata={"tome": summary}, **summary, tokens=tokens, retention=retention(top1),
                      config=config.to_dict())


__all__ = ["FINETUNE_DIR", "MODEL_DIR", "SCHEDULE_FILE", "ToMeConfig", "ToMeReport", "run_tome"]
