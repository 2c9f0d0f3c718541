"""Depth pruning's settings, without torch: the command line builds its options from them (:mod:`vitprune.lazy`)."""

from __future__ import annotations

from dataclasses import dataclass

from vitprune.config import JsonRecord, setting
from vitprune.errors import VitpruneError
from vitprune.surgery import ATTENTION_IDENTITIES, IDENTITY_HELP, OUTPUT_GELU_HELP, depth_requirements


@dataclass
class DepthConfig(JsonRecord):
    """Which layers go and how (:func:`~vitprune.surgery.prune_depth`'s settings)."""

    attention: list[int] = setting(default_factory=list,
                                   help="Blocks whose attention sublayer goes, e.g. 0,3,7,8,11.")
    activation: list[int] = setting(default_factory=list,
                                    help="Blocks whose MLP activation goes (fc1 and fc2 merge).")
    identity: str = setting("norm", choices=ATTENTION_IDENTITIES, help=IDENTITY_HELP)
    fold_norm: bool = setting(False, flag="--fold-norm", help="Fold each merged block's LN2 affine into its Linear.")
    output_gelu: bool = setting(False, flag="--output-gelu", help=OUTPUT_GELU_HELP)

    @property
    def requires(self) -> tuple[str, ...]:
        """What removing these layers needs of a model's family."""
        return depth_requirements(self.attention, self.activation, self.output_gelu)

    def validate(self) -> None:
        """Fail at once on a config that prunes nothing or names an unknown identity (indices are checked against
        the model by :func:`~vitprune.surgery.prune_depth`)."""
        if not self.attention and not self.activation:
            raise VitpruneError("nothing to prune: give attention and/or activation block indices")
        if self.identity not in ATTENTION_IDENTITIES:
            raise VitpruneError(f"unknown identity {self.identity!r} (choose from: {', '.join(ATTENTION_IDENTITIES)})")


__all__ = ["DepthConfig"]
