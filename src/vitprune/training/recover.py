"""Recovering accuracy after pruning: fine-tune the pruned model, optionally distilling from the unpruned one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from rich.console import Console
from torch import nn
from torch.utils.data import Dataset

from vitprune.errors import VitpruneError
from vitprune.training.config import DistillConfig, TrainConfig
from vitprune.training.distill import DistillationLoss, make_teacher, use_distillation_head
from vitprune.training.distributed import DistContext, init_distributed
from vitprune.training.engine import Trainer, TrainHooks
from vitprune.training.progress import training_progress


def finetune_pruned(student: nn.Module, train_set: Dataset, val_set: Dataset | None, config: TrainConfig, *,
                    teacher: nn.Module | None = None, distill: str = DistillConfig.distill,
                    alpha: float = DistillConfig.alpha, tau: float = DistillConfig.tau,
                    run_dir: str | Path | None = None, device: torch.device | str | None = None,
                    dist: DistContext | None = None, progress: bool = False, resume: bool = False,
                    console: Console | None = None, on_epoch: Callable[[dict], None] | None = None) -> list[dict]:
    """Fine-tune ``student`` in place; returns the per-epoch history (with ``val_top1`` when ``val_set`` is given).

    With ``distill`` ``"soft"`` or ``"hard"`` the loss mixes the labels with a frozen copy of
    ``teacher`` (weight ``alpha``, temperature ``tau``). ``run_dir`` keeps the run's checkpoints,
    from which ``resume`` continues. Under torchrun pass ``dist`` (every process calls this; the
    teacher goes to each process's device); ``progress`` then shows on the main process only, as does
    ``on_epoch``, which receives each epoch's entry of the history as the epoch ends.
    """
    # Resolved here, as the Trainer would, so that the teacher lands on the student's device.
    dist = dist if dist is not None else init_distributed(None if device is None else str(device))
    criterion = None
    if distill != "none":
        if teacher is None:
            raise VitpruneError(f"{distill} distillation needs a teacher model")
        use_distillation_head(student, distill)
        teacher = make_teacher(teacher).to(dist.device)
        criterion = DistillationLoss(config.label_loss(), teacher,
                                     kind=distill, alpha=alpha, tau=tau)
    trainer = Trainer(student, train_set, config, run_dir=run_dir, criterion=criterion, val_set=val_set, dist=dist,
                      hooks=None if on_epoch is None else _EpochEnd(on_epoch))
    trainer.start(resume=resume)
    try:
        with training_progress(trainer, enabled=progress and dist.is_main, console=console) as on_batch:
            return trainer.fit(on_batch=on_batch)
    finally:
        use_distillation_head(student, "none")


class _EpochEnd(TrainHooks):
    """Hands each epoch's statistics to ``on_epoch`` as the epoch ends, on the main process."""

    def __init__(self, on_epoch: Callable[[dict], None]) -> None:
        self.on_epoch = on_epoch

    def on_epoch_end(self, trainer: Trainer, stats: dict[str, float]) -> None:
        if trainer.dist.is_main:
            self.on_epoch(stats)
