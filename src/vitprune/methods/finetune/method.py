"""Fine-tuning as a registered method: the chain's ``finetune`` step, distilling from the chain's starting model."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

from vitprune.methods.base import (
    Method, MethodData, RunContext, build_config, build_train_config, register_method, split_settings,
)
from vitprune.methods.finetune.config import FinetuneRun
from vitprune.training.config import DistillConfig, TrainConfig

if TYPE_CHECKING:
    from torch import nn

    from vitprune.methods.finetune.pipeline import FinetuneReport


class Finetune(Method):
    name = "finetune"
    title = "fine-tuning"
    help = "Fine-tune the model, distilling from the model the run started from as --distill says."
    config = FinetuneRun
    data = ("train", "val")
    #: ``vitprune finetune`` is its own command (it can also train a new head).
    command = False
    compare_skip = "is the recovery every arm gets (and the dense control's)"
    settings = "TrainConfig's fields (epochs required) and DistillConfig's: distill (default none), alpha, tau"

    def configure(self, settings: dict[str, Any], preset: str) -> FinetuneRun:
        own, train_settings = split_settings(settings, {f.name for f in fields(DistillConfig)})
        run = FinetuneRun(build_train_config(train_settings, self.name), build_config(DistillConfig, own, self.name))
        run.validate()
        return run

    def run(self, model: nn.Module, data: MethodData, config: FinetuneRun, ctx: RunContext) -> FinetuneReport:
        from vitprune.methods.finetune.pipeline import run_finetune

        return run_finetune(model, data.train, data.val, config, ctx)

    def summarize(self, report: FinetuneReport, config: FinetuneRun) -> dict[str, Any]:
        return {**asdict(config.distill), "epochs": config.train.epochs}


register_method(Finetune())
