"""STAR's settings, without torch: the command line builds its options from them (:mod:`vitprune.lazy`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from vitprune.config import SEED_HELP, JsonRecord, setting
from vitprune.errors import VitpruneError
from vitprune.measure.target import SPELLING, MacTarget
from vitprune.training import KINDS, TrainConfig
from vitprune.training.presets import get_preset

#: What the ACS keep rates are anchored to: the first and last blocks' ACS (the paper's) or the lowest and highest.
ANCHORS = ("paper", "minmax")
#: How STAR does without LRP relevance (a family that cannot propagate it, or a model it cannot run through), as its
#: refusal ends.
WITHOUT_LRP = ("--attention-weight 1 (alpha 1 in a chain file) ranks tokens by the online [CLS] attention alone, "
               "without the LRP prior")
#: What decides the LRP prior besides the model and the data: an earlier run's prior is taken only where they are the
#: same.
LRP_SETTINGS = ("lrp_images", "classes", "calibration_batch", "seed")
#: The paper's fine-tuning recipe, the source of :class:`STARConfig`'s fine-tuning defaults.
PRESET = "imagenet-star"
_RECIPE = get_preset(PRESET)


@dataclass
class STARConfig(JsonRecord):
    """Every setting of the pipeline; the defaults are the paper's for DeiT on ImageNet."""

    #: Exactly one of ``rho``, ``target_macs`` and ``rates`` is set (``rho`` is ``None`` when another one is).
    rho: float | None = setting(0.7, alternative=True,
                                help="Keep rate of the last block (sets every block's rate).")
    #: Full-convention MACs per image, reached by bisection on rho.
    target_macs: MacTarget | None = setting(None, alternative=True, parse=MacTarget.parse, aliases=("--macs",),
                                            alias_parse=MacTarget.from_gmacs,
                                            help=f"MACs per image to reach (full convention): {SPELLING}; finds "
                                                 "rho.")
    #: Stop short of ``target_macs`` (:func:`~vitprune.methods.star.rho_for_macs`' ``above``): a chain's next step
    #: (VBP's neuron trim) reaches it exactly.
    above: bool = False
    #: No ACS is computed for hand-set rates.
    rates: list[float] | None = setting(None, alternative=True,
                                        help="Hand-set keep rate per block, e.g. 1,1,1,0.7,...,0.5.")
    #: Per-image counts by weighted percentile instead of ``ceil(p·n)``.
    adaptive: bool = setting(False, flag="--adaptive",
                             help="a-STAR: per-image token counts (never more than STAR).")
    #: Paper: 0.15 for DeiT, 0.3 for LV-ViT.
    alpha: float = setting(0.15, flag="--attention-weight", aliases=("--alpha",), help="Weight of the online [CLS] attention vs the LRP prior (1: attention only).")
    anchor: str = setting("paper", choices=ANCHORS, help="ACS anchors: paper (first/last block) or minmax.")
    acs_images: int = setting(500, min=1, help="Training images for the ACS (paper: 500).")
    #: Paper: T=10 rounds of 128-512.
    lrp_images: int = setting(1280, min=1, help="Training images for the LRP prior.")
    classes: int = setting(6, min=1, help="Top predicted classes per image in the LRP prior (paper: 6).")
    #: An earlier run's ``inter.safetensors``: the prior it computed, taken where this run's model, data and LRP
    #: settings are the same (``vitprune compare``'s STAR arms at each target).
    prior: str | None = setting(None, help="inter.safetensors of an earlier STAR run on the same model, data and LRP "
                                           "settings: its LRP prior, not computed again.")
    calibration_batch: int = 32
    #: Of the calibration subsets and fine-tuning.
    seed: int = setting(0, help=SEED_HELP)
    #: Fine-tuning after pruning (``None``: none): the ``imagenet-star`` preset (:mod:`vitprune.training.presets`),
    #: 120 epochs, cosine 2e-5 -> 2e-9 per 512 images, hard distillation from the unpruned model.
    finetune: TrainConfig | None = field(default_factory=lambda: get_preset(PRESET).train)
    distill: str = setting(_RECIPE.distill.distill, choices=KINDS,
                           help="Distillation from the unpruned model while fine-tuning.")
    distill_alpha: float = _RECIPE.distill.alpha
    tau: float = _RECIPE.distill.tau
    #: Validation images the a-STAR MAC average is taken over (its cost depends on the image).
    mac_images: int = 64

    @property
    def requires(self) -> tuple[str, ...]:
        """What STAR needs of a model's family: token reduction, and LRP where the prior has a weight."""
        return ("token_reduction", *(["lrp"] if self.alpha < 1 else []))

    def __post_init__(self) -> None:
        self.target_macs = MacTarget.coerce(self.target_macs)

    def validate(self) -> None:
        """Fail at once, before any pass over data, on a setting a later stage would reject."""
        if sum(x is not None for x in (self.rho, self.target_macs, self.rates)) != 1:
            raise VitpruneError("give exactly one of rho, target_macs (--target-macs) and rates (per-block keep "
                                "rates)")
        if self.above and self.target_macs is None:
            raise VitpruneError("above (stop short of the MAC target) needs target_macs")
        if self.rates is not None and not all(0 < r <= 1 for r in self.rates):
            raise VitpruneError(f"keep rates must be in (0, 1], got {self.rates}")
        if self.rho is not None and not 0 < self.rho <= 1:
            raise VitpruneError(f"rho must be in (0, 1], got {self.rho}")
        if not 0 <= self.alpha <= 1:
            raise VitpruneError(f"alpha must be in [0, 1], got {self.alpha}")
        if self.prior is not None and self.alpha == 1:
            raise VitpruneError("an LRP prior (prior) has no weight at alpha 1 (--attention-weight 1); leave one out")
        for name, allowed in (("anchor", ANCHORS), ("distill", KINDS)):
            if getattr(self, name) not in allowed:
                raise VitpruneError(f"unknown {name} {getattr(self, name)!r} (choose from: {', '.join(allowed)})")
        for name in ("acs_images", "lrp_images", "classes", "mac_images"):
            if getattr(self, name) < 1:
                raise VitpruneError(f"{name.replace('_', ' ')} must be at least 1, got {getattr(self, name)}")
        if self.finetune is not None:
            self.finetune.validate()


__all__ = ["ANCHORS", "LRP_SETTINGS", "PRESET", "WITHOUT_LRP", "STARConfig"]
