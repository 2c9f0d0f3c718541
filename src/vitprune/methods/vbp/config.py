"""VBP's settings, without torch: the command line builds its options from them (:mod:`vitprune.lazy`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vitprune.config import SEED_HELP, JsonRecord, setting
from vitprune.errors import VitpruneError
from vitprune.measure.target import SPELLING, MacTarget
from vitprune.training import KINDS, TrainConfig
from vitprune.training.presets import get_preset

#: Criterion name -> what it scores. ``variance`` is VBP; the rest are the paper's comparisons.
CRITERIA = {
    "variance": "post-activation variance (VBP)",
    "pre-variance": "pre-activation variance, the output of fc1 (Table 7's ablation)",
    "mean": "absolute post-activation mean: how large a neuron's output is, not how much it varies (a baseline "
            "for the variance: a constant output, however large, is what the compensation restores)",
    "magnitude": "L2 norm of the neuron's weights: fc1 row and bias, fc2 column (Table 3)",
    "snip": "SNIP sensitivity |sum over tokens of dL/dh * h| on labelled batches (Table 3)",
    "random": "uniform random scores (Table 6's row without the variance criterion)",
}

#: How ``ratio * total`` becomes a neuron count. ``ceil`` is the only one that reproduces every
#: parameter count the paper prints (implementation note, section 1.4).
ROUNDINGS = {"ceil": math.ceil, "floor": math.floor, "round": round}

#: What decides the activation statistics besides the model and the data: an earlier run's are taken only where they
#: are the same.
STATISTICS_SETTINGS = ("calibration_images", "calibration_batch", "seed")
#: The paper's fine-tuning recipe, the source of :class:`VBPConfig`'s fine-tuning defaults.
PRESET = "imagenet-vbp"
_RECIPE = get_preset(PRESET)


#: What VBP needs of a model's family (:data:`vitprune.adapters.CAPABILITIES`).
REQUIRES = ("ffn_width",)


@dataclass
class VBPConfig(JsonRecord):
    """Every setting of the pipeline; the defaults are the paper's (ImageNet, DeiT)."""

    #: Exactly one of ``ratio`` and ``target_macs`` is set (``ratio`` is ``None`` when the target is).
    ratio: float | None = setting(0.5, help="Share of all MLP hidden neurons to remove, ranked globally, e.g. 0.5.",
                                  short="-p", alternative=True)
    #: The fewest lowest-ranked neurons whose removal brings the model to this many full-convention MACs per image.
    target_macs: MacTarget | None = setting(None, alternative=True, parse=MacTarget.parse, aliases=("--macs",),
                                            alias_parse=MacTarget.from_gmacs,
                                            help=f"MACs per image to reach (full convention): {SPELLING}; removes "
                                                 "the fewest lowest-ranked neurons that reach it.")
    criterion: str = setting("variance", choices=CRITERIA,
                             help="Neuron score: variance is VBP; the rest are baselines (docs/vbp.md).")
    compensate: bool = setting(True, help="Fold the removed neurons' means into the next bias (mean-shift).")
    rounding: str = "ceil"
    #: 0, the paper's setting, lets an MLP lose all of its neurons.
    min_width: int = setting(0, min=0, help="Neurons every MLP keeps (paper: 0).")
    #: Drawn class-balanced; the statistics and SNIP are computed on them.
    calibration_images: int | None = setting(None, min=2, help="Training images for the statistics (default: all, "
                                                               "as the paper).")
    calibration_batch: int = 64
    #: An earlier run's ``statistics.safetensors``: the statistics it computed, taken where this run's model, data and
    #: calibration settings are the same (``vitprune compare``'s VBP arms at each target).
    statistics: str | None = setting(None, help="statistics.safetensors of an earlier VBP run on the same model, "
                                                "data and calibration images: its statistics, not computed again.")
    #: Of the calibration subset, the random criterion and fine-tuning.
    seed: int = setting(0, help=SEED_HELP)
    #: Fine-tuning after pruning (``None``: none): the ``imagenet-vbp`` preset (:mod:`vitprune.training.presets`),
    #: the paper's 10 epochs, AdamW, lr 1.5e-5, cosine, batch 32, weight decay 0.01, distillation from the
    #: unpruned model.
    finetune: TrainConfig | None = field(default_factory=lambda: get_preset(PRESET).train)
    distill: str = setting(_RECIPE.distill.distill, choices=KINDS, aliases=("--no-distill=none",),
                           help="Distillation from the unpruned model while fine-tuning.")
    #: 1 is pure distillation (the note's reading of the paper's KD).
    alpha: float = setting(_RECIPE.distill.alpha, help="Weight of the distillation term (1: distillation only).")
    tau: float = setting(_RECIPE.distill.tau, help="Distillation temperature.")

    def __post_init__(self) -> None:
        self.target_macs = MacTarget.coerce(self.target_macs)

    def validate(self) -> None:
        """Fail at once, before the statistics pass, on a setting a later stage would reject."""
        if (self.ratio is None) == (self.target_macs is None):
            raise VitpruneError("give exactly one of ratio and target_macs (--target-macs)")
        if self.ratio is not None and not 0 < self.ratio < 1:
            raise VitpruneError(f"the pruning ratio must be in (0, 1), got {self.ratio}: 1 would remove every MLP "
                                "neuron of the network")
        for name, allowed in (("criterion", CRITERIA), ("rounding", ROUNDINGS), ("distill", KINDS)):
            if getattr(self, name) not in allowed:
                raise VitpruneError(f"unknown {name} {getattr(self, name)!r} (choose from: {', '.join(allowed)})")
        if self.statistics is not None and not self.needs_statistics:
            raise VitpruneError(f"the {self.criterion} criterion without compensation uses no activation statistics; "
                                "leave statistics out")
        if self.calibration_images is not None and self.calibration_images < 2:
            raise VitpruneError(f"calibration needs at least 2 images, got {self.calibration_images}")
        if self.finetune is not None:
            self.finetune.validate()

    @property
    def needs_statistics(self) -> bool:
        """Whether a post-activation statistics pass is needed: for the variance score or the compensation."""
        return self.compensate or self.criterion in ("variance", "mean")


__all__ = ["REQUIRES", "CRITERIA", "PRESET", "ROUNDINGS", "STATISTICS_SETTINGS", "VBPConfig"]
