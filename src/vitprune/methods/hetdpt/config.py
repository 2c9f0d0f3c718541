"""HetDPT's settings, without torch: the command line builds its options from them (:mod:`vitprune.lazy`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from vitprune.config import SEED_HELP, JsonRecord, setting
from vitprune.errors import VitpruneError
from vitprune.surgery import ATTENTION_IDENTITIES, IDENTITY_HELP, OUTPUT_GELU_HELP
from vitprune.training import KINDS, TrainConfig
from vitprune.training.config import TRAINING_HELP

#: Which type each round of Algorithm 2 removes first.
INTERLEAVED_ORDERS: dict[str, tuple[str, str]] = {
    "attention-first": ("attention", "activation"),  # the paper's Algorithm 2
    "activation-first": ("activation", "attention"),  # how the paper's DeiT-B data were collected
}


#: What HetDPT needs of a model's family (:data:`vitprune.adapters.CAPABILITIES`).
REQUIRES = ("attention_removal", "activation_removal", "output_activation", "gates")


@dataclass
class HetDPTConfig(JsonRecord):
    """Every setting of the pipeline; :func:`~vitprune.methods.hetdpt.pipeline.preset` gives tested starting points,
    :func:`~vitprune.methods.hetdpt.pipeline.configure` changes them."""

    #: What a removed attention leaves (:data:`vitprune.surgery.ATTENTION_IDENTITIES`).
    identity: str = setting("norm", choices=ATTENTION_IDENTITIES, help=IDENTITY_HELP)
    #: The reference code's GELU on the output of every block that lost both layers (compatibility only: the
    #: paper's block has none). Where it is on, Steps 1 and 2 apply it as the pruned model does (TE, the fast
    #: fine-tunes, the gated search), so that they measure and train the function Stage 2 fine-tunes.
    output_gelu: bool = setting(False, flag="--output-gelu", help=OUTPUT_GELU_HELP)
    # Step 1: predictor data and fit.
    #: Fast fine-tune after each removal while collecting predictor data.
    probe: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=10, lr=5e-5, batch_size=128))
    #: Class-balanced training subset the fast fine-tunes run on (``None``: the whole training set).
    probe_images: int | None = setting(None, min=1, help="Class-balanced training images each predictor point's fast "
                                                         "fine-tune runs on.")
    #: Training images the transfer entropy is estimated on.
    te_images: int = setting(2048, min=1, help="Calibration images transfer entropy is estimated on.")
    #: Rank each type's layers by TE once, on the starting model, and remove them in that order in every sweep
    #: (the paper's TE-Static ranking; a compare arm's quick effort), instead of measuring TE again each round.
    te_once: bool = setting(False, flag="--te-once", help="Predictor data: rank the layers by transfer entropy "
                                                          "once (TE-Static), not again after each removal.")
    #: Layers per type removed by the single-type sweeps (Algorithm 1); ``None``: the budget, at most L.
    sweep_layers: int | None = None
    #: Rounds of the interleaved sweep (Algorithm 2), one layer of each type per round; ``None``: budget // 2,
    #: which reaches the even split on the budget line.
    interleaved_rounds: int | None = None
    #: Which type the interleaved sweep removes first in each round.
    interleaved_order: str = "attention-first"
    degrees: tuple[int, ...] = (1, 2, 3, 4)
    min_per_type: int = setting(0, min=0, help="Predictor search: remove at least this many of each type.")
    # Step 2: learnable importance.
    search: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=20, lr=5e-5, batch_size=128))
    prune_fraction: float = 0.5
    #: Step 2 chooses each type's layers among its lowest-TE ones (one TE pass from the model it starts from, on
    #: ``te_images`` calibration images): this share of the type's layers, rounded, but at least as many as it
    #: removes (:func:`~vitprune.methods.hetdpt.importance.shortlist_size`). Our reading of the reference code's
    #: hard-coded candidate lists, which hold 8 of DeiT's 12 blocks per type and look TE-ranked (the ablation's
    #: "TE + Step 2"): the share 2/3, so 8 of 12 blocks, and as many in proportion at other depths. 1: every layer
    #: is a candidate (no TE).
    shortlist: float = setting(2 / 3, min=0, max=1, help="Step 2 chooses among each type's lowest-TE layers, this "
                                                      "share of them (2/3: the reference code's 8 of 12); 1: all.")
    # Stage 2: fine-tuning (``None``: prune and merge only, e.g. when a chain fine-tunes later).
    finetune: TrainConfig | None = field(default_factory=lambda: TrainConfig(epochs=100, lr=5e-5, batch_size=128,
                                                                      warmup_epochs=5))
    distill: str = setting("none", choices=KINDS, help="Self-distillation from the unpruned model in Stage 2.")
    alpha: float = 0.5
    tau: float = 1.0
    #: Stage 2 starts from the ``original`` weights (the reference code) or from the Step-2 ``search`` ones.
    init: str = "original"
    #: Stage 2 ends by merging each fc1·fc2 pair whose GELU went into one Linear (exact). Off, ``model/`` keeps
    #: them apart (recipe edits ``remove_activation`` with ``merge=False``), so that a recovery run elsewhere
    #: (``vitprune finetune``, a chain's fine-tune step) trains the two linears as the paper's Stage 2 does;
    #: ``vitprune prune merge`` (:func:`~vitprune.methods.hetdpt.merge.run_merge`) merges them afterwards.
    merge: bool = setting(True, help="End by merging each fc1·fc2 pair whose GELU went; --no-merge keeps them "
                                     "apart for a later fine-tune, then `vitprune prune merge`.")

    def validate(self) -> None:
        """Fail at once, not after hours of earlier stages, on a setting a later stage would reject."""
        choices = {"identity": ATTENTION_IDENTITIES, "distill": KINDS, "init": ("original", "search"),
                   "interleaved_order": INTERLEAVED_ORDERS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise VitpruneError(f"unknown {name} {getattr(self, name)!r} (choose from: {', '.join(allowed)})")
        if not 0 < self.shortlist <= 1:
            raise VitpruneError(f"shortlist is a share of each type's layers, in (0, 1]; got {self.shortlist}")
        for stage in (self.probe, self.search, self.finetune):
            if stage is not None:
                stage.validate()


@dataclass(frozen=True)
class StageOverrides:
    """Shortcuts into a preset's stage configs (``None``: the preset's value), for
    :func:`~vitprune.methods.hetdpt.pipeline.configure`."""

    epochs: int | None = setting(None, min=1, help=TRAINING_HELP["epochs"])
    search_epochs: int | None = setting(None, min=1, help="Step-2 importance epochs.")
    probe_epochs: int | None = setting(None, min=1, help="Fast fine-tune epochs per predictor point.")
    lr: float | None = setting(None, help=TRAINING_HELP["lr"])
    #: Every stage's; each stage's lr scales with it.
    batch_size: int | None = setting(None, short="-b", min=1, help=TRAINING_HELP["batch_size"])
    workers: int | None = setting(None, min=0, help=TRAINING_HELP["workers"])
    #: Of every stage's training (data order, augmentation).
    seed: int | None = setting(None, help=SEED_HELP)

    def apply(self, config: HetDPTConfig) -> HetDPTConfig:
        """``config`` with these changes; a new batch scales each stage's lr (:meth:`TrainConfig.at_batch`)
        unless an lr is given."""
        stages = {"probe": config.probe, "search": config.search, "finetune": config.finetune}
        changes = {"probe": {"epochs": self.probe_epochs}, "search": {"epochs": self.search_epochs},
                   "finetune": {"epochs": self.epochs, "lr": self.lr}}
        for stage in changes.values():
            stage.update(workers=self.workers, seed=self.seed)
        for stage, train in stages.items():
            if train is None:
                continue
            if self.batch_size is not None:
                train = train.at_batch(self.batch_size)
            stages[stage] = replace(train, **{k: v for k, v in changes[stage].items() if v is not None})
        return replace(config, **stages)


@dataclass
class HetDPTBudget:
    """How many layers HetDPT removes, how it splits them between the two types, and what it starts from."""

    #: ``None`` only where a command takes the preset alone (a chain's HetDPT steps name their budgets).
    budget: Optional[int] = setting(None, short="-k", required=True,
                                    help="Layers to remove in all: attention sublayers + GELUs.")
    split: str = setting("auto", help="auto (the accuracy predictor decides) or A,G layers of each type.")
    preset: Optional[str] = setting(None, help="HetDPT's settings: digits (minutes on a CPU) or imagenet-hetdpt (the "
                                               "paper's recipe at its code's scale, docs/recipes.md; alias imagenet); "
                                               "default by --data.")
    predictor: Optional[Path] = setting(None, help="Reuse predictor.json from an earlier run.")


@dataclass
class MergeConfig:
    """HetDPT's last step on its own (:func:`~vitprune.methods.hetdpt.merge.run_merge`)."""

    fold_norm: bool = setting(False, flag="--fold-norm", help="Fold each merged block's LN2 affine into its Linear.")


@dataclass
class HetDPTRun:
    """Everything a HetDPT run needs: the layer budget, the split (``None``: the predictor's), the pipeline's settings
    and an earlier run's predictor to reuse."""

    budget: int
    split: tuple[int, int] | None = None
    config: HetDPTConfig = field(default_factory=HetDPTConfig)
    predictor: str | Path | None = None

    def validate(self) -> None:
        self.config.validate()


def preset_for(preset: str | None, data: str | None) -> str:
    """HetDPT's preset for a run on ``data``: the one asked for, else ``digits`` for vitprune's own small datasets
    (digits, cluttered-mnist) and ``imagenet-hetdpt`` for any other."""
    return preset or ("digits" if data in ("digits", "cluttered-mnist") else "imagenet-hetdpt")


__all__ = ["REQUIRES", "HetDPTBudget", "HetDPTRun", "preset_for", "MergeConfig", "INTERLEAVED_ORDERS", "HetDPTConfig",
           "StageOverrides"]
