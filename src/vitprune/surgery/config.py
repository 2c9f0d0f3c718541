"""Depth surgery's choices and what they need, without torch: method configs and the command line read them
(:mod:`vitprune.lazy`)."""

from __future__ import annotations

from collections.abc import Sequence

#: What a removed attention sublayer leaves in its residual branch.
ATTENTION_IDENTITIES: dict[str, str] = {
    "norm": "x + LN1(x): attention replaced by the identity inside the branch (HetDPT's reference code; default)",
    "skip": "x: the whole attention branch dropped",
}
#: :data:`ATTENTION_IDENTITIES` in one line, for an option's help.
IDENTITY_HELP = "What a removed attention leaves: norm = x + LN1(x) (HetDPT's code), skip = x."
#: ``output_gelu`` of :func:`~vitprune.surgery.prune_depth` in one line, for an option's help.
OUTPUT_GELU_HELP = "Compatibility: GELU after blocks that lost both layers, as HetDPT's code does."


def depth_requirements(attention: Sequence[int], activation: Sequence[int],
                       output_gelu: bool = False) -> tuple[str, ...]:
    """What removing the attention of blocks ``attention`` and the activation of blocks ``activation`` (with
    ``output_gelu``, a GELU on the output of the blocks that lose both) needs of a model's family."""
    return (*(["attention_removal"] if attention else []), *(["activation_removal"] if activation else []),
            *(["output_activation"] if output_gelu else []))


__all__ = ["ATTENTION_IDENTITIES", "IDENTITY_HELP", "OUTPUT_GELU_HELP", "depth_requirements"]
