"""The papers' ImageNet training recipes, by name: one place that methods and the command line take them from.

Each :class:`Preset` is a :class:`~vitprune.training.TrainConfig` and the distillation it runs with,
transcribed from the method notes (``shared/notes/*.md``; the section is in :attr:`Preset.source`).
Where a paper and its code disagree, the code that produced the paper's headline row wins, and the
preset's docstring says so. Learning rates follow DeiT's rule ``lr = base_lr · global batch / 512``:
a preset states the lr for its own global batch, and :meth:`TrainConfig.at_batch` rescales it.
``docs/recipes.md`` tabulates every value with its source.

What the HetDPT and STAR papers' code adds to the settings they state is DeiT's training recipe (its
``main.py`` defaults, which their scripts run): AdamW at weight decay 0.05, warm-up from 1e-6, cosine
to 1e-5, label smoothing 0.1, mixup 0.8, cutmix 1.0, RandAugment ``rand-m9-mstd0.5-inc1``, random
erasing 0.25 (per-pixel noise), repeated augmentation (3 copies), drop path 0.1 and AMP.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any, Optional

from vitprune.config import setting
from vitprune.errors import VitpruneError
from vitprune.training.config import TRAINING_HELP, DistillConfig, TrainConfig, scaled_lr

#: The global batch a base learning rate is stated for (DeiT's rule).
LR_REFERENCE_BATCH = 512

#: DeiT's training recipe: its ``main.py`` defaults, which the HetDPT and STAR scripts leave as they are.
DEIT_RECIPE: dict[str, Any] = {
    "optimizer": "adamw", "weight_decay": 0.05, "warmup_lr": 1e-6, "min_lr": 1e-5, "label_smoothing": 0.1,
    "mixup_alpha": 0.8, "cutmix_alpha": 1.0, "auto_augment": "rand-m9-mstd0.5-inc1", "re_prob": 0.25,
    "aug_repeats": 3, "drop_path": 0.1, "amp": True,
}

#: DeiT's model EMA decay (the EMA weights are kept, not evaluated).
DEIT_EMA = 0.99996


@dataclass(frozen=True)
class Preset:
    """A paper's training recipe: the engine's settings and the distillation, with where they come from."""

    name: str
    #: The schedule, optimizer and regularisation, lr at ``train.batch_size``.
    train: TrainConfig
    #: The distillation from the unpruned model (``None``: the method's loss has its own, as HiAP's KD).
    distill: DistillConfig | None
    #: The learning rate per 512 images of global batch the paper or its code states.
    base_lr: float
    #: The note sections the values are transcribed from.
    source: str
    #: What is the paper's, what its code's, what the note's reading, and where they disagree.
    doc: str


def _preset(name: str, *, distill: DistillConfig | None, source: str, doc: str, base_lr: float | None = None,
            lr: float | None = None, **train: Any) -> Preset:
    """A preset whose lr is stated per 512 images (``base_lr``, DeiT's scripts) or for its own batch (``lr``)."""
    batch = train["batch_size"]
    if lr is None:
        lr = scaled_lr(base_lr, LR_REFERENCE_BATCH, batch)
    else:
        base_lr = scaled_lr(lr, batch, LR_REFERENCE_BATCH)
    # Not validated here, which would import torch and timm for its augmentation: a test validates every preset.
    return Preset(name=name, train=TrainConfig(lr=lr, **train), distill=distill, base_lr=base_lr, source=source,
                  doc=doc)


_PRESETS = [
    _preset(
        "imagenet-hetdpt", base_lr=5e-5, distill=DistillConfig("hard", alpha=0.5, tau=1.0),
        source="hetdpt.md §1.6, §2.1, §2.2 (Stage 2), §5 #13 and #15",
        doc="HetDPT Stage 2, the fine-tune of the pruned model: the official log of the DeiT-B row (400 epochs, "
            "8 GPUs x 512, base lr 5e-5 -> 4e-4 peak, warm-up 10 epochs from 1e-6, cosine to 1e-5, weight decay "
            "0.08, drop path 0.1, mixup 0.8, cutmix 1.0, smoothing 0.1, RandAugment rand-m9-mstd0.5-inc1, random "
            "erasing 0.25, repeated augmentation, EMA 0.99996, hard distillation alpha 0.5 tau 1 from the dense "
            "model, AMP, seed 42). The paper says 8 GPUs x 128 and a cosine from 5e-5 to 1e-5 with no epochs, "
            "warm-up or weight decay; the log that produced the headline row wins. The log initialises the student "
            "from the distilled DeiT-B checkpoint: that is the model the user brings, not a setting here.",
        epochs=400, batch_size=4096, warmup_epochs=10.0, **{**DEIT_RECIPE, "weight_decay": 0.08},
        ema_decay=DEIT_EMA, seed=42),
    _preset(
        "imagenet-hetdpt-step1", base_lr=5e-5, distill=DistillConfig("none"),
        source="hetdpt.md §1.4.3, §2.1 (MAP data), §2.2 (Stage 1 Step 1 scripts), §5 #4",
        doc="HetDPT Step 1's fast fine-tune after each removal, on the representative subset: 10 epochs (the "
            "paper's 'typically 10 epochs'; the code's single-type scripts run 30 for attention and 5 for "
            "activation, but no MAP code was released, so the paper's number stands), 4 GPUs x 256, base lr 5e-5 "
            "scaled, no warm-up, cosine (the scripts); the rest DeiT's recipe, which the scripts leave as it is, "
            "except the EMA, which no fast fine-tune's result reads.",
        epochs=10, batch_size=1024, warmup_epochs=0.0, **DEIT_RECIPE),
    _preset(
        "imagenet-hetdpt-step2", base_lr=5e-5, distill=DistillConfig("none"),
        source="hetdpt.md §1.5 ([code] Step-2 defaults), §2.2 (Stage 1 Step 2), §5 #10",
        doc="HetDPT Step 2, learning the within-type importance: the code's defaults (80 search epochs, 8 GPUs x "
            "512, base lr 5e-5 scaled, min lr 1e-5, weight decay 0.05, warm-up 15 epochs) with DeiT's augmentation "
            "(the note's task loss: CE with mixup, cutmix and label smoothing). The code's 'cyclecosine' (cosine "
            "restarts at each pruning milestone) is not available: one cosine spans the run. The paper's '0.5 "
            "hours for layer identification' cannot be 80 ImageNet epochs; the code's schedule is what exists. No "
            "EMA: the search's result is the chosen layers.",
        epochs=80, batch_size=4096, warmup_epochs=15.0, **DEIT_RECIPE),
    _preset(
        "imagenet-star", base_lr=2e-5, distill=DistillConfig("hard", alpha=0.25, tau=1.0),
        source="star.md §1.9, §2 (Fine-tuning rows), §5 #12",
        doc="STAR's fine-tune: 120 epochs with hard distillation from the unpruned model and a cosine from 2e-5 to "
            "2e-9 (the paper). Those are the DeiT script's --lr and --min-lr, which it scales (--lr only) by global "
            "batch / 512, as the README's --lr 2e-4 --min-lr 2e-10 pair is; the paper's pair wins over the "
            "README's example. The README's 8 GPUs x 256, no warm-up and distillation alpha 0.25 (the paper gives "
            "none) and DeiT's recipe with its EMA for the rest (the code's defaults). The teacher is the unpruned "
            "model, as the paper says, not the script's default RegNetY-160.",
        epochs=120, batch_size=2048, warmup_epochs=0.0, **{**DEIT_RECIPE, "min_lr": 2e-9}, ema_decay=DEIT_EMA),
    _preset(
        "imagenet-vbp", lr=1.5e-5, distill=DistillConfig("soft", alpha=1.0, tau=1.0),
        source="vbp.md §1.7 (fine-tuning), §2, §5 #8 and #9",
        doc="VBP's fine-tune: 10 epochs, AdamW, lr 1.5e-5 at batch 32, cosine annealing, weight decay 0.01, "
            "distillation from the unmodified model (the paper). Unstated, the note's reading: a per-step cosine "
            "to 0 without warm-up, timm's standard augmentation (random resized crop and flip) and nothing more, "
            "pure soft distillation (alpha 1, tau 1). The paper's code is its own, not DeiT's.",
        epochs=10, batch_size=32, optimizer="adamw", weight_decay=0.01),
    _preset(
        "imagenet-hiap", lr=5e-5, distill=None,
        source="hiap.md §2.1, §2.2, §5 B3-B5",
        doc="HiAP's single phase on ImageNet: 200 epochs, AdamW, lr 5e-5 at global batch 256 (the paper). "
            "Unstated, the note's reading: no warm-up (the gates start near-dense), weight decay 0.05 and DeiT's "
            "augmentation and drop path 0.1 for the rest, with its cosine to 1e-5. No EMA (the gates must follow "
            "the weights). The KD from the dense model (alpha 0.7, T 4) and the temperature schedule (2.0 -> 0.5) "
            "are HiAP's own loss, in HiAPConfig.",
        epochs=200, batch_size=256, warmup_epochs=0.0, **DEIT_RECIPE),
]
PRESETS: dict[str, Preset] = {p.name: p for p in _PRESETS}


def get_preset(name: str) -> Preset:
    """The preset ``name`` (a copy: change it freely); an unknown name is a one-line error."""
    if name not in PRESETS:
        raise VitpruneError(f"unknown training preset {name!r} (choose from: {', '.join(PRESETS)})")
    return copy.deepcopy(PRESETS[name])


@dataclass
class FinetuneOptions:
    """The training a method runs after pruning (HiAP: its gate training) as a user asks for it: a paper's recipe by
    --preset, or the method's own schedule, changed by the options named. Without --preset or --epochs there is
    none (HiAP refuses to start)."""

    preset: Optional[str] = setting(None, help=f"Train with a paper's recipe ({', '.join(PRESETS)}; docs/recipes.md): "
                                               "its epochs, batch, schedule and augmentation; the options here change "
                                               "it.")
    epochs: Optional[int] = setting(None, min=0, aliases=("--finetune-epochs",), help=TRAINING_HELP["epochs"])
    lr: Optional[float] = setting(None, help=TRAINING_HELP["lr"])
    batch_size: Optional[int] = setting(None, short="-b", min=1, help=TRAINING_HELP["batch_size"])
    workers: Optional[int] = setting(None, min=0, help=TRAINING_HELP["workers"])

    def recipe(self, own: TrainConfig) -> TrainConfig:
        """The recipe the options change: --preset's, else the method's ``own``."""
        return get_preset(self.preset).train if self.preset else own

    def training(self, recipe: TrainConfig, *, seed: int, batch: int | None = None) -> TrainConfig | None:
        """The training asked for over ``recipe`` (:meth:`recipe`'s) (``None``: none, without --epochs or --preset), at
        --batch-size, else the preset's batch, else ``batch`` (``None``: the recipe's); its lr scaled with the batch
        (:meth:`TrainConfig.at_batch`) unless --lr is given."""
        epochs = self.epochs if self.epochs is not None else recipe.epochs if self.preset else 0
        if not epochs:
            return None
        batch = self.batch_size or (None if self.preset else batch)
        train = recipe.at_batch(batch) if batch is not None else recipe
        changes = {"epochs": epochs, "lr": self.lr, "seed": seed, "workers": self.workers}
        return replace(train, **{k: v for k, v in changes.items() if v is not None})


__all__ = ["DEIT_EMA", "DEIT_RECIPE", "LR_REFERENCE_BATCH", "PRESETS", "FinetuneOptions", "Preset", "get_preset"]
