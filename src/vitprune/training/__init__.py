"""Training and evaluation: the fine-tuning engine, distillation losses, the papers' training presets, distributed
helpers, evaluation."""

from __future__ import annotations

from vitprune.lazy import lazy_exports
from vitprune.training.config import KINDS, OPTIMIZERS, DistillConfig, TrainConfig
from vitprune.training.presets import PRESETS, Preset, get_preset

__getattr__, __dir__ = lazy_exports(__name__, {
    ".distill": ("DistillationLoss", "make_teacher", "use_distillation_head"),
    ".engine": ("Trainer", "TrainHooks", "seed_all", "weight_decay_groups"),
    ".evaluation": ("evaluate",),
    ".recover": ("finetune_pruned",),
})

__all__ = [
    "KINDS", "DistillConfig", "DistillationLoss", "OPTIMIZERS", "PRESETS", "Preset", "TrainConfig", "TrainHooks",
    "Trainer", "evaluate", "finetune_pruned", "get_preset", "make_teacher", "seed_all",
    "use_distillation_head", "weight_decay_groups",
]
