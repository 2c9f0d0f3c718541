"""A run's settings, without torch: the engine's :class:`TrainConfig`, a fine-tune's :class:`DistillConfig` and the
choices they take; the presets, method configs and the command line read them (:mod:`vitprune.lazy`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from vitprune.config import SEED_HELP, setting
from vitprune.errors import VitpruneError, check_settings

if TYPE_CHECKING:
    from torch import nn

#: The optimizers a run can use.
OPTIMIZERS = ("adamw", "sgd")

#: The help of the training options every command that trains shares (``vitprune finetune``, the methods' fine-tunes,
#: HetDPT's Stage 2, HiAP's training): one text for one meaning.
TRAINING_HELP = {
    "epochs": "Training epochs (of the fine-tune after pruning; HiAP: of its training with the gates).",
    "lr": "Peak learning rate (after warm-up); a recipe's scales with --batch-size unless this is given.",
    "batch_size": "Global batch (split over processes).",
    "workers": "Data-loading worker processes per training process (the result does not depend on them).",
}

#: Distillation kinds: no teacher term, KL to the teacher's softened distribution, CE to its argmax.
KINDS = ("none", "soft", "hard")


@dataclass
class TrainConfig:
    """Everything that determines a run's result (saved in each checkpoint and checked on resume)."""

    epochs: int = setting(min=1, help=TRAINING_HELP["epochs"])
    lr: float = setting(5e-4, help=TRAINING_HELP["lr"])
    batch_size: int = setting(64, short="-b", min=1, help=TRAINING_HELP["batch_size"])
    optimizer: str = setting("adamw", choices=OPTIMIZERS, help="Optimizer.")
    momentum: float = setting(0.9, help="SGD momentum.")
    weight_decay: float = setting(0.05, help="Weight decay.")
    warmup_epochs: float = setting(0.0, help="Linear warm-up epochs.")
    #: ``None``: a thousandth of ``lr``. Not scaled with the batch (DeiT scales only the peak lr).
    warmup_lr: float | None = setting(None, help="Learning rate the warm-up starts from (default: lr / 1000).")
    min_lr: float = setting(0.0, help="Learning rate the cosine schedule ends at.")
    label_smoothing: float = setting(0.0, help="Label smoothing.")
    mixup_alpha: float = setting(0.0, flag="--mixup", min=0.0, help="timm mixup alpha (0: off).")
    cutmix_alpha: float = setting(0.0, flag="--cutmix", min=0.0, help="timm cutmix alpha (0: off).")
    #: Applied by the training set's transform: :func:`vitprune.data.augmented` rebuilds it for the run.
    auto_augment: str | None = setting(None, help="timm RandAugment/AutoAugment policy of the training images, e.g. "
                                                  "rand-m9-mstd0.5-inc1 (DeiT's).")
    re_prob: float = setting(0.0, min=0.0, max=1.0, help="Random-erasing probability (per-pixel noise, as DeiT).")
    #: DeiT's RASampler / timm's RepeatAugSampler (:class:`~vitprune.training.sampler.ResumableSampler`).
    aug_repeats: int = setting(1, min=1, help="Repeated augmentation: each image this many times in a row of "
                                              "the epoch's order, spread over the processes (DeiT: 3; 1: off).")
    #: ``None`` leaves the model's own (timm builds models with none).
    drop_path: float | None = setting(None, min=0.0, max=1.0, help="Stochastic depth: the last block's drop-path "
                                                                   "rate, rising from 0 at the first (timm's rule).")
    clip_grad: float | None = setting(None, help="Max gradient norm.")
    accum_steps: int = setting(1, min=1, help="Micro-batches per optimisation step.")
    amp: bool = setting(True, help="Mixed precision on CUDA (ignored on CPU).")
    ema_decay: float | None = setting(None, help="Keep an EMA of the weights with this decay.")
    #: Of a new head's initialisation, data order and augmentation.
    seed: int = setting(0, help=SEED_HELP)
    checkpoint_every: int = setting(0, min=0, help="Steps between checkpoints (0: epochs).")
    #: Not part of the result: each image is augmented under its own seed, whichever process loads it.
    workers: int = setting(0, min=0, help=TRAINING_HELP["workers"])

    def validate(self) -> None:
        """Raise a one-line error for settings that cannot run."""
        check_settings([
            (self.epochs >= 1, f"epochs must be at least 1, got {self.epochs}"),
            (self.lr > 0, f"learning rate must be positive, got {self.lr}"),
            (self.batch_size >= 1, f"batch size must be at least 1, got {self.batch_size}"),
            (self.accum_steps >= 1, f"accumulation steps must be at least 1, got {self.accum_steps}"),
            (self.optimizer in OPTIMIZERS, f"unknown optimizer {self.optimizer!r} (use adamw or sgd)"),
            (self.ema_decay is None or 0 < self.ema_decay < 1, f"EMA decay must lie in (0, 1), got {self.ema_decay}"),
            (self.checkpoint_every >= 0, "checkpoint_every must be >= 0 (0: at epoch ends only)"),
            (self.mixup_alpha >= 0 and self.cutmix_alpha >= 0, "mixup and cutmix alphas must be >= 0"),
            (self.warmup_lr is None or self.warmup_lr >= 0, f"warm-up lr must be >= 0, got {self.warmup_lr}"),
            (0 <= self.re_prob <= 1, f"random-erasing probability must lie in [0, 1], got {self.re_prob}"),
            (self.workers >= 0, f"workers must be >= 0, got {self.workers}"),
            (self.aug_repeats >= 1, f"augmentation repeats must be at least 1, got {self.aug_repeats}"),
            (self.drop_path is None or 0 <= self.drop_path < 1,
             f"drop-path rate must lie in [0, 1), got {self.drop_path}"),
        ])
        from vitprune.data import check_augmentation  # builds timm's transform: torch only once a run is checked

        check_augmentation(self.augment)

    def at_batch(self, batch_size: int) -> TrainConfig:
        """This run at another global batch, its peak learning rate scaled with it (DeiT's and the papers' rule,
        ``lr = base_lr · batch / 512``: presets state the lr for their own batch)."""
        return replace(self, batch_size=batch_size, lr=scaled_lr(self.lr, self.batch_size, batch_size))

    @property
    def augment(self) -> dict[str, Any]:
        """The training images' random augmentation, as :func:`vitprune.data.build_dataset` and
        :func:`vitprune.data.augmented` take it."""
        return {"auto_augment": self.auto_augment, "re_prob": self.re_prob}

    @property
    def mixes(self) -> bool:
        """Whether batches are mixed (mixup or cutmix)."""
        return self.mixup_alpha > 0 or self.cutmix_alpha > 0

    def label_loss(self) -> nn.CrossEntropyLoss:
        """Cross-entropy on the labels, smoothed once: by ``label_smoothing``, or not at all where mixup/cutmix are on,
        since timm's Mixup already folds the smoothing into the soft targets it returns."""
        from torch import nn

        return nn.CrossEntropyLoss(label_smoothing=0.0 if self.mixes else self.label_smoothing)


@dataclass
class DistillConfig:
    """A fine-tune's distillation: ``vitprune finetune`` and a chain's ``finetune`` step take theirs from here (none
    unless asked for, since it needs a teacher)."""

    distill: str = setting("none", choices=KINDS, help="Distillation from the teacher: soft (KL) or hard (DeiT).")
    alpha: float = setting(0.5, help="Weight of the distillation term.")
    tau: float = setting(1.0, help="Temperature of soft distillation.")

    def validate(self) -> None:
        """Raise a one-line error for settings that cannot run."""
        if self.distill not in KINDS:
            raise VitpruneError(f"unknown distill {self.distill!r} (choose from: {', '.join(KINDS)})")


def scaled_lr(lr: float, batch_size: int, new_batch_size: int) -> float:
    """A learning rate set for ``batch_size``, at ``new_batch_size``: linear in the global batch (DeiT's rule)."""
    return lr * new_batch_size / batch_size
