"""Training and evaluation: the fine-tuning engine, distillation losses, the papers' training presets, distributed
helpers, evaluation."""

from __future__ import annotations

from vitprune.training.distill import KINDS, DistillationLoss, make_teacher, use_distillation_head
from vitprune.training.engine import OPTIMIZERS, TrainConfig, Trainer, TrainHooks, weight_decay_groups
from vitprune.training.evaluation import evaluate
from vitprune.training.presets import PRESETS, Preset, get_preset
from vitprune.training.recover import DistillConfig, finetune_pruned

__all__ = [
    "KINDS", "DistillConfig", "DistillationLoss", "OPTIMIZERS", "PRESETS", "Preset", "TrainConfig", "TrainHooks",
    "Trainer", "evaluate", "finetune_pruned", "get_preset", "make_teacher",
    "use_distillation_head", "weight_decay_groups",
]
