"""ToMe's settings, without torch: the command line builds its options from them (:mod:`vitprune.lazy`)."""

from __future__ import annotations

from dataclasses import dataclass

from vitprune.config import SEED_HELP, JsonRecord, setting
from vitprune.errors import VitpruneError
from vitprune.measure.target import SPELLING, MacTarget
from vitprune.training import KINDS, TrainConfig

#: What ToMe needs of a model's family.
REQUIRES = ("token_reduction",)


@dataclass
class ToMeConfig(JsonRecord):
    """Every setting of a ToMe run; the defaults are the paper's off-the-shelf use (no training, proportional
    attention)."""

    #: Exactly one of ``r`` and ``target_macs`` is set (``r`` is ``None`` when the target is).
    r: int | None = setting(8, min=0, alternative=True,
                            help="Tokens merged per block (the schedule's mean with --inflect).")
    #: The smallest r (with the schedule) whose MACs are at most this many full-convention MACs per image.
    target_macs: MacTarget | None = setting(None, alternative=True, parse=MacTarget.parse, aliases=("--macs",),
                                            alias_parse=MacTarget.from_gmacs,
                                            help=f"MACs per image to reach (full convention): {SPELLING}; finds r.")
    #: Stop short of ``target_macs`` (the last r above it): a chain's next step (VBP's neuron trim) reaches it exactly.
    above: bool = False
    #: ToMe's ``(r, inflect)`` schedule: 0 constant, -1 the paper's decreasing schedule (2r in the first block to 0 in
    #: the last), +1 increasing.
    inflect: float = setting(0.0, help="Schedule of r over the blocks: 0 constant, -1 decreasing from 2r to 0 (the "
                                       "paper's), +1 increasing.")
    #: Proportional attention: each key's logit takes log(size), as if its token were repeated size times.
    proportional: bool = setting(True, help="Proportional attention: weigh each key by the patches its token stands "
                                            "for (the paper's for supervised models).")
    calibration_batch: int = 64
    #: Of fine-tuning, where there is one.
    seed: int = setting(0, help=SEED_HELP)
    #: Fine-tuning after merging (``None``: none; ToMe needs no training, and the command line recovers through
    #: ``vitprune finetune`` or a chain's ``finetune`` step), distilling from the unmerged model as ``distill`` says.
    finetune: TrainConfig | None = None
    distill: str = "soft"
    alpha: float = 1.0
    tau: float = 1.0

    def __post_init__(self) -> None:
        self.target_macs = MacTarget.coerce(self.target_macs)

    def validate(self) -> None:
        """Fail at once, before any pass over data, on a setting a later stage would reject."""
        if (self.r is None) == (self.target_macs is None):
            raise VitpruneError("give exactly one of r and target_macs (--target-macs)")
        if self.above and self.target_macs is None:
            raise VitpruneError("above (stop short of the MAC target) needs target_macs")
        if self.r is not None and self.r < 0:
            raise VitpruneError(f"r (tokens merged per block) must be at least 0, got {self.r}")
        if not -1 <= self.inflect <= 1:
            raise VitpruneError(f"inflect must be in [-1, 1], got {self.inflect}")
        if self.distill not in KINDS:
            raise VitpruneError(f"unknown distill {self.distill!r} (choose from: {', '.join(KINDS)})")
        if self.finetune is not None:
            self.finetune.validate()


__all__ = ["REQUIRES", "ToMeConfig"]
