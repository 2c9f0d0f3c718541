"""Width pruning's settings, without torch: the command line builds its options from them (:mod:`vitprune.lazy`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vitprune.config import SEED_HELP, JsonRecord, setting
from vitprune.errors import VitpruneError
from vitprune.measure import CONVENTIONS
from vitprune.measure.target import SPELLING, MacTarget

#: Importance criteria, by name: what each ranks a channel group by.
IMPORTANCES: dict[str, str] = {
    "magnitude": "L1 norm of the group's weights (data-free)",
    "taylor": "|weight · gradient| summed over the group (first-order Taylor; needs batches)",
}


def check_attention_shares(heads: float, head_dims: float) -> None:
    """``heads`` and ``head_dims`` (shares of the width ratio) in [0, 1]."""
    for name, share in (("heads", heads), ("head_dims", head_dims)):
        if not 0.0 <= share <= 1.0:
            raise VitpruneError(f"{name} (a share of the width ratio) must be in [0, 1], got {share}")


def width_requirements(embed: bool, heads: float = 1.0, head_dims: float = 0.5) -> tuple[str, ...]:
    """What width pruning needs of a model's family: FFN neurons; heads or head dimensions unless both shares are 0;
    the residual stream's channels with ``embed``."""
    return (*(["head_width"] if heads or head_dims else []), "ffn_width", *(["embed_width"] if embed else []))


#: How width pruning does without what a family lacks, as its refusal ends.
WIDTH_WITHOUT = {"embed_width": "--no-embed (\"embed\": false in a chain file) keeps the residual stream whole",
                 "head_width": "--heads 0 --head-dims 0 (\"heads\": 0, \"head_dims\": 0) keeps every head whole"}


@dataclass
class WidthConfig(JsonRecord):
    """How much to cut and how torch-pruning chooses it (:func:`~vitprune.methods.width.plan_width`'s settings)."""

    #: Exactly one of ``ratio`` and ``target_macs`` is set.
    ratio: float | None = setting(None, short="-p", alternative=True, help="torch-pruning's channel ratio, e.g. 0.5.")
    #: MACs per image in ``convention``, reached by bisection on the ratio.
    target_macs: MacTarget | None = setting(None, alternative=True, parse=MacTarget.parse, aliases=("--macs",),
                                            alias_parse=MacTarget.from_gmacs,
                                            help=f"MACs per image to reach (in --convention): {SPELLING}; found by "
                                                 "bisection on the ratio.")
    #: Stop short of ``target_macs`` (:func:`~vitprune.methods.width.prune_width_to_macs`' ``above``): a chain's
    #: next step (VBP's neuron trim) reaches it exactly.
    above: bool = False
    convention: str = setting("full", choices=CONVENTIONS, help="MAC convention of --target-macs: full (with attention "
                                                                "matmuls), linear (Linear/Conv only) or tp "
                                                                "(torch-pruning's counter, as the HetDPT+ and "
                                                                "Isomorphic Pruning tables count).")
    importance: str = setting("magnitude", choices=IMPORTANCES,
                              help="magnitude (data-free) or taylor (needs training data).")
    #: Attention as Isomorphic Pruning's DeiT scripts prune it: whole heads at the ratio, and in the heads left the
    #: same head dimensions at half the ratio.
    heads: float = setting(1.0, min=0, max=1, help="Whole heads removed, as a share of the ratio (0: keep every "
                                                   "head).")
    head_dims: float = setting(0.5, min=0, max=1, help="Head dimensions removed from the heads left, as a share of "
                                                       "the ratio (0: none; 1: ranked with the other channels).")
    embed: bool = setting(True, help="Also prune the residual stream's channels.")
    isomorphic: bool = setting(True, flag="--isomorphic/--global",
                               help="Rank within groups of the same shape (Isomorphic Pruning) or all together.")
    round_to: int | None = setting(None, min=1, help="Keep every width a multiple of N (8: faster kernels).")
    #: Taylor importance's images: training images with the evaluation transform, as Isomorphic Pruning takes them.
    #: 16 x 64 = 1,024: where the pruned set's split-half agreement reaches about 0.9 on the digits model
    #: (benchmarks/taylor_stability.py; docs/width.md, "How many images taylor importance needs").
    taylor_batches: int = setting(16, min=1, help="Batches of --taylor-batch-size training images (evaluation "
                                                  "transform) for taylor importance.")
    taylor_batch_size: int = setting(64, min=1, help="Images per taylor-importance batch.")
    #: Of the images taylor importance draws.
    seed: int = setting(0, help=SEED_HELP)

    @property
    def requires(self) -> tuple[str, ...]:
        """What width pruning with these settings needs of a model's family."""
        return width_requirements(self.embed, self.heads, self.head_dims)

    def plan_options(self) -> dict[str, Any]:
        """The options :func:`~vitprune.methods.width.plan_width` plans with (the report's ``options``)."""
        return {"importance": self.importance, "heads": self.heads, "head_dims": self.head_dims, "embed": self.embed,
                "isomorphic": self.isomorphic, "round_to": self.round_to}

    def __post_init__(self) -> None:
        # The target counts in the config's convention; an unknown convention is validate's to name.
        if self.convention in CONVENTIONS:
            self.target_macs = MacTarget.coerce(self.target_macs, convention=self.convention)

    def validate(self) -> None:
        """Fail at once, before torch-pruning plans, on a setting it would reject."""
        if (self.ratio is None) == (self.target_macs is None):
            raise VitpruneError("give exactly one of ratio and target_macs (--target-macs)")
        if self.above and self.target_macs is None:
            raise VitpruneError("above (stop short of the MAC target) needs target_macs")
        if self.ratio is not None and not 0 <= self.ratio < 1:
            raise VitpruneError(f"width ratio must be in [0, 1), got {self.ratio}")
        for name, allowed in (("convention", CONVENTIONS), ("importance", IMPORTANCES)):
            if getattr(self, name) not in allowed:
                raise VitpruneError(f"unknown {name} {getattr(self, name)!r} (choose from: {', '.join(allowed)})")
        if self.round_to is not None and self.round_to < 1:
            raise VitpruneError(f"round_to must be at least 1, got {self.round_to}")
        check_attention_shares(self.heads, self.head_dims)
        for name in ("taylor_batches", "taylor_batch_size"):
            if getattr(self, name) < 1:
                raise VitpruneError(f"{name} must be at least 1, got {getattr(self, name)}")


__all__ = ["IMPORTANCES", "WIDTH_WITHOUT", "WidthConfig", "check_attention_shares", "width_requirements"]
