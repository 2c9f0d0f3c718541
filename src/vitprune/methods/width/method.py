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
    compare_skip = None

    def target_steps(self, model: nn.Module, macs: float, effort: str, *, exact: bool = True) -> list[dict[str, Any]]:
        from vitprune.adapters import get_adapter

        # What the family cannot have cut stays whole, as WIDTH_WITHOUT tells a user to do.
        have = get_adapter(model).capabilities
        heads = {"heads": 0.0, "head_dims": 0.0} if "head_width" not in have else {}
        return [{"method": self.name, "target_macs": macs, "importance": "taylor", "embed": "embed_width" in have,
                 **heads, "taylor_batches": 2 if effort == "quick" else 16}]

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
