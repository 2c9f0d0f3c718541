"""Training and evaluation of classifiers."""

from __future__ import annotations

from vitprune.training.loop import evaluate, fit, train_one_epoch, train_step

__all__ = ["evaluate", "fit", "train_one_epoch", "train_step"]
