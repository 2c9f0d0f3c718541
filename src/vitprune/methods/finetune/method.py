"""Fine-tuning as a registered method: the chain's ``finetune`` step, distilling from the chain's starting model
(``vitprune finetune`` is a command of its own: it can also train a new head)."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

from vitprune.methods.finetune.config import FinetuneRun
from vitprune.runs.method import ChainStep, Method, build_config, build_train_config, split_settings
from vitprune.training.config import DistillConfig

if TYPE_CHECKING:
    from vitprune.methods.finetune.pipeline import FinetuneReport


class Finetune(Method, ChainStep):
    name = "finetune"
    title = "fine-tuning"
    config = FinetuneRun
    data = ("train", "val")
    no_target = "is the recovery every arm gets (and the dense control's)"
    settings = "TrainConfig's fields (epochs required) and DistillConfig's: distill (default none), alpha, tau"

    def configure(self, settings: dict[str, Any], preset: str) -> FinetuneRun:
        own, train_settings = split_settings(settings, {f.name for f in fields(DistillConfig)})
        run = FinetuneRun(build_train_config(train_settings, self.name), build_config(DistillConfig, own, self.name))
        run.validate()
        return run

    def summarize(self, report: FinetuneReport, config: FinetuneRun) -> dict[str, Any]:
        return {**asdict(config.distill), "epochs": config.train.epochs}
