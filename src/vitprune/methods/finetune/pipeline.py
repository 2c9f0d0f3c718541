"""A fine-tune as a method's run: fine-tune a copy, save it to ``run_dir/model``; its checkpoints go to
``run_dir/run``, from which a resumed run continues."""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from vitprune.recipe import RUN_MODEL_DIR, save
from vitprune.runs.context import MethodData, RunContext, method_run
from vitprune.runs.report import Report
from vitprune.training import finetune_pruned
from vitprune.training.distributed import on_main

if TYPE_CHECKING:
    from torch import nn

    from vitprune.methods.finetune.config import FinetuneRun

#: Where the fine-tune's checkpoints go in its run directory.
RUN_DIR = "run"


@dataclass
class FinetuneReport(Report):
    """What :func:`run_finetune` did."""

    train: dict[str, Any]
    distill: dict[str, Any]
    model_dir: str


@method_run
def run_finetune(model: nn.Module, data: MethodData, config: FinetuneRun, ctx: RunContext) -> FinetuneReport:
    """Fine-tune a copy of ``model`` on ``data.train`` (validating on ``data.val``) as ``config`` says, distilling
    from ``ctx.teacher`` (default ``model``), and save it to ``ctx.run_dir/model``. Under torchrun the fine-tune is
    data-parallel and rank 0 saves."""
    student = copy.deepcopy(model)
    distill = config.distill
    finetune_pruned(student, data.train, data.val, config.train, teacher=ctx.teacher if ctx.teacher is not None
                    else model, distill=distill.distill, alpha=distill.alpha, tau=distill.tau,
                    run_dir=ctx.run_dir / RUN_DIR, device=ctx.device, progress=ctx.progress, resume=ctx.resume,
                    dist=ctx.dist, on_epoch=ctx.on_epoch)
    model_dir = ctx.run_dir / RUN_MODEL_DIR
    on_main(lambda: save(student, model_dir))
    return FinetuneReport(train=asdict(config.train), distill=asdict(distill), model_dir=str(model_dir))
