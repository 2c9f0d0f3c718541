"""Training and evaluation: the fine-tuning engine, distillation losses, distributed helpers, evaluation."""

from __future__ import annotations

from vitprune.training.distill import KINDS, DistillationLoss, make_teacher, use_distillation_head
from vitprune.training.engine import OPTIMIZERS, TrainConfig, Trainer, TrainHooks, weight_decay_groups
from vitprune.training.evaluation import evaluate
from vitprune.training.recover import DistillConfig, finetune_pruned

__all__ = [
    "KINDS", "DistillConfig", "DistillationLoss", "OPTIMIZERS", "TrainConfig", "TrainHooks", "Trainer", "evaluate",
    "finetune_pruned", "make_teacher",
    "use_distillation_head", "weight_decay_groups",
]
