"""Training and evaluation: the fine-tuning engine, distillation losses and the small loop behind the digits model."""

from __future__ import annotations

from vitprune.training.distill import KINDS, DistillationLoss, make_teacher, use_distillation_head
from vitprune.training.engine import TrainConfig, Trainer, TrainHooks
from vitprune.training.loop import evaluate, fit, train_one_epoch, train_step

__all__ = [
    "KINDS", "DistillationLoss", "TrainConfig", "TrainHooks", "Trainer", "evaluate", "fit", "make_teacher",
    "train_one_epoch", "train_step", "use_distillation_head",
]
