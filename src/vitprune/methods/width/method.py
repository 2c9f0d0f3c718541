"""Width pruning as a registered method: ``vitprune prune width`` and the chain's ``width`` step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitprune.errors import VitpruneError
from vitprune.methods.base import Method, MethodData, RunContext, register_method
from vitprune.methods.width.config import WIDTH_WITHOUT, WidthConfig

if TYPE_CHECKING:
    from torch import nn

    from vitprune.methods.width.pipeline import WidthReport


class Width(Method):
    name = "width"
    title = "width pruning"
    help = ("Width pruning chosen by torch-pruning (Isomorphic Pruning: stream channels, heads and head dims, FFN "
            "neurons), cut by recorded edits; show before/after. Fine-tune the result with `vitprune finetune`.")
    config = WidthConfig
    #: Taylor importance ranks on training images under the evaluation transform; magnitude needs no data.
    data = ("calibration",)
    data_optional = True
    out_is_model = True
    summary = ("ratio", "plan", "taylor_images")
    settings = ("WidthConfig's fields: ratio or target_macs (with convention), importance, heads, head_dims, embed, "
                "isomorphic, round_to, taylor_batches, taylor_batch_size")
    without = WIDTH_WITHOUT

    def run(self, model: nn.Module, data: MethodData, config: WidthConfig, ctx: RunContext) -> WidthReport:
        from vitprune.methods.width.pipeline import run_width

        if config.importance == "taylor" and data.calibration_or_train is None:
            raise VitpruneError("taylor importance needs --data")
        return run_width(model, config, out=ctx.run_dir, train_set=data.calibration_or_train, name=ctx.name,
                         speed=ctx.speed, device=ctx.device, progress=ctx.progress, dist=ctx.dist)

    def title_of(self, report: Any) -> str:
        options = report.options
        return (f"width ratio {report.ratio:.4f} ({options['importance']}, "
                f"{'isomorphic' if options['isomorphic'] else 'global'}, heads {options['heads']:g}, head dims "
                f"{options['head_dims']:g}{', stream channels' if options['embed'] else ''})")


register_method(Width())
