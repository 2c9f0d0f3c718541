"""A fine-tune step's settings, without torch."""

from __future__ import annotations

from dataclasses import dataclass

from vitprune.training.config import DistillConfig, TrainConfig


@dataclass
class FinetuneRun:
    """A fine-tune: its training and its distillation (default none)."""

    train: TrainConfig
    distill: DistillConfig

    def validate(self) -> None:
        self.train.validate()
        self.distill.validate()
