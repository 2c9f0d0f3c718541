"""Width pruning as a registered method: ``vitprune prune width``, the chain's ``width`` step and a
``vitprune compare`` arm."""

from __future__ import annotations

from typing import Any

from vitprune.measure.target import MacTarget
from vitprune.methods.width.config import WIDTH_WITHOUT, WidthConfig
from vitprune.runs.method import ChainStep, CommandLine, Method, Model, TargetSearch, get_method


class Width(Method, CommandLine, ChainStep, TargetSearch):
    name = "width"
    title = "width pruning"
    config = WidthConfig
    #: Taylor importance ranks on training images under the evaluation transform; magnitude needs no data.
    data = ("calibration",)
    out_is_model = True
    without = WIDTH_WITHOUT
    help = ("Width pruning chosen by torch-pruning (Isomorphic Pruning: stream channels, heads and head dims, FFN "
            "neurons), cut by recorded edits; show before/after. Fine-tune the result with `vitprune finetune`.")
    data_optional = True
    summary = ("ratio", "plan", "taylor_images")
    settings = ("WidthConfig's fields: ratio or target_macs (with convention and above), importance, heads, head_dims, "
                "embed, isomorphic, round_to, taylor_batches, taylor_batch_size")

    def title_of(self, report: Any) -> str:
        options = report.options
        return (f"width ratio {report.ratio:.4f} ({options['importance']}, "
                f"{'isomorphic' if options['isomorphic'] else 'global'}, heads {options['heads']:g}, head dims "
                f"{options['head_dims']:g}{', stream channels' if options['embed'] else ''})")

    def search_cost(self, model: Model, step: dict[str, Any], images: int, val_images: int
                    ) -> tuple[float, float]:
        # Taylor importance: one gradient pass over its batches (torch-pruning's planning costs no images)
        if step.get("importance", "magnitude") != "taylor":
            return 0.0, 0.0
        config = WidthConfig(ratio=0.5, **{k: v for k, v in step.items() if k in ("taylor_batches",
                                                                                  "taylor_batch_size")})
        return float(min(config.taylor_batches * config.taylor_batch_size, images)), 0.0

    def target_steps(self, model: Model, target: MacTarget, effort: str, *, exact: bool = True
                     ) -> list[dict[str, Any]]:
        """Width pruning's bisection on the ratio, then, with ``exact``, VBP's neuron trim to the target: the width
        step stops at the last ratio above it (a ratio moves in whole heads and channels), as HetDPT's whole layers
        stop above it."""
        from vitprune.adapters import get_adapter

        # What the family cannot have cut stays whole, as WIDTH_WITHOUT tells a user to do.
        have = get_adapter(model).capabilities
        heads = {"heads": 0.0, "head_dims": 0.0} if "head_width" not in have else {}
        width = {"method": self.name, "target_macs": target.to_json(), "convention": target.convention,
                 "importance": "taylor", "embed": "embed_width" in have, **heads,
                 "taylor_batches": 2 if effort == "quick" else 16}
        if not exact:
            return [width]
        return [{**width, "above": True}, *get_method("vbp").target_steps(model, target, effort)]
