"""What a comparison spends: the recovery every arm gets, the training images and each method's own effort."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from vitprune.errors import VitpruneError
from vitprune.training.config import DistillConfig, TrainConfig
from vitprune.training.presets import get_preset


@dataclass
class CompareBudget:
    """One comparison's spending. Every arm (and the dense control) gets the same ``recovery`` with ``distill`` from
    the dense model, on ``train_images`` class-balanced training images (``None``: all); ``effort`` sizes each
    method's own selection (:data:`vitprune.runs.method.EFFORTS`); every arm runs under ``seeds`` seeds unless the
    comparison names them."""

    name: str
    recovery: TrainConfig
    distill: DistillConfig
    train_images: int | None
    effort: str
    seeds: int

    def recovery_settings(self, seed: int) -> dict[str, Any]:
        """The ``finetune`` chain step of the recovery: epochs, lr, batch and the training settings that differ from
        :class:`~vitprune.training.TrainConfig`'s defaults, seeded, with the distillation."""
        default = TrainConfig(epochs=1)
        train = {f.name: getattr(self.recovery, f.name) for f in fields(TrainConfig)
                 if f.name in ("epochs", "lr", "batch_size")
                 or getattr(self.recovery, f.name) != getattr(default, f.name)}
        return {**train, "seed": seed, **asdict(self.distill)}


#: ``quick``: one seed, one epoch on 2,000 training images (the claims page's recovery: AdamW 1e-4, soft distillation); minutes
#: for a small model on a CPU. ``standard``: three seeds, ten epochs on every training image (VBP's fine-tune length), the same
#: schedule. ``paper``: three seeds of the HetDPT paper's headline recipe for every arm (``imagenet-hetdpt``: DeiT's recipe, hard
#: distillation, 400 epochs, the longest of the papers' fine-tunes), each method's search at its paper's settings.
BUDGETS = {
    "quick": CompareBudget("quick", TrainConfig(epochs=1, lr=1e-4, batch_size=64), DistillConfig("soft", 1.0, 1.0),
                           2000, "quick", 1),
    "standard": CompareBudget("standard", TrainConfig(epochs=10, lr=1e-4, batch_size=64),
                              DistillConfig("soft", 1.0, 1.0), None, "standard", 3),
    "paper": CompareBudget("paper", get_preset("imagenet-hetdpt").train, get_preset("imagenet-hetdpt").distill, None,
                           "paper", 3),
}


def get_budget(name: str, *, epochs: int | None = None, train_images: int | None = None) -> CompareBudget:
    """The budget ``name``, its recovery ``epochs`` and ``train_images`` changed where given; an unknown name or a
    count below 1 is one line."""
    if name not in BUDGETS:
        raise VitpruneError(f"unknown budget {name!r} (choose from: {', '.join(BUDGETS)})")
    budget = BUDGETS[name]
    for what, value in (("epochs", epochs), ("training images", train_images)):
        if value is not None and value < 1:
            raise VitpruneError(f"{what} must be at least 1, got {value}")
    recovery = replace(budget.recovery, epochs=epochs) if epochs is not None else budget.recovery
    return replace(budget, recovery=recovery, train_images=train_images or budget.train_images)


__all__ = ["BUDGETS", "CompareBudget", "get_budget"]
