"""Training and evaluation: the fine-tuning engine, distillation losses, distributed helpers, evaluation."""

from __future__ import annotations

from vitprune.training.distill import KINDS, DistillationLoss, make_teacher, use_distillation_head
from vitprune.training.engine import TrainConfig, Trainer, TrainHooks
from vitprune.training.evaluation import evaluate
from vitprune.training.recover import FINETUNE_DISTILL, finetune_pruned

__all__ = [
    "FINETUNE_DISTILL", "KINDS", "DistillationLoss", "TrainConfig", "TrainHooks", "Trainer", "evaluate",
    "finetune_pruned", "make_teacher",
    "use_distillation_head",
]
