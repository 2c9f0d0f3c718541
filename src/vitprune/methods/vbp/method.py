"""VBP as a registered method: ``vitprune prune vbp`` and the chain's ``vbp`` step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitprune.methods.base import Method, MethodData, RunContext, register_method
from vitprune.methods.vbp.config import REQUIRES, VBPConfig

if TYPE_CHECKING:
    from torch import nn

    from vitprune.methods.vbp.pipeline import VBPReport


class VBP(Method):
    name = "vbp"
    title = "VBP"
    help = ("VBP: remove the MLP neurons of lowest activation variance network-wide, fold their means; fine-tune if "
            "asked (the paper: 10 epochs of its recipe, --preset imagenet-vbp).")
    config = VBPConfig
    #: Without --preset the command line fine-tunes on the paper's schedule, for --epochs.
    recipe = VBPConfig().finetune
    summary = ("removed", "widths")
    fixed = {"finetune": None}
    settings = "VBPConfig's fields: ratio or target_macs, criterion, compensate, calibration_images, ..."

    def defaults(self, settings: dict[str, Any]) -> dict[str, Any]:
        # ratio's default (0.5) gives way to a MAC target.
        return {"ratio": None} if "target_macs" in settings else {}

    compare_skip = None

    def target_steps(self, model: nn.Module, macs: float, effort: str, *, exact: bool = True) -> list[dict[str, Any]]:
        # quick and standard: statistics on a class-balanced subset, as the claims page takes them
        images = {"quick": 256, "standard": 2048, "paper": None}[effort]
        return [{"method": self.name, "target_macs": macs, "calibration_images": images}]

    def requires(self, config: VBPConfig) -> tuple[str, ...]:
        return REQUIRES

    def run(self, model: nn.Module, data: MethodData, config: VBPConfig, ctx: RunContext) -> VBPReport:
        from vitprune.methods.vbp.pipeline import run_vbp

        return run_vbp(model, data, config, ctx)


register_method(VBP())
