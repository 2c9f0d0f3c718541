"""Depth pruning by hand as a registered method: ``vitprune prune depth`` and the chain's ``depth`` step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitprune.methods.base import Method, MethodData, RunContext, register_method
from vitprune.methods.depth.config import DepthConfig

if TYPE_CHECKING:
    from torch import nn

    from vitprune.methods.depth.pipeline import DepthReport


class Depth(Method):
    name = "depth"
    title = "depth pruning"
    help = ("Remove attention sublayers and MLP activations (HetDPT/BoundaryDPT depth pruning); show before/after.")
    config = DepthConfig
    data = ()
    out_is_model = True
    seeded = False
    summary = ("attention", "activation", "identity", "fold_norm", "output_gelu")
    compare_skip = "removes the layers it is given; HetDPT's arm chooses them"
    settings = "DepthConfig's fields: attention, activation (block indices), identity, fold_norm, output_gelu"

    def run(self, model: nn.Module, data: MethodData, config: DepthConfig, ctx: RunContext) -> DepthReport:
        from vitprune.methods.depth.pipeline import run_depth

        return run_depth(model, config, out=ctx.run_dir, name=ctx.name, speed=ctx.speed, device=ctx.device,
                         progress=ctx.progress, dist=ctx.dist)

    def title_of(self, report: Any) -> str:
        return (f"attention removed in blocks {report.attention or 'none'}, activation in "
                f"{report.activation or 'none'} (identity '{report.identity}')")


register_method(Depth())
