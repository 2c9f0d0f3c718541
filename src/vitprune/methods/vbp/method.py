"""VBP as a registered method: ``vitprune prune vbp`` and the chain's ``vbp`` step."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    settings = "VBPConfig's fields: ratio, criterion, compensate, calibration_images, ..."

    def requires(self, config: VBPConfig) -> tuple[str, ...]:
        return REQUIRES

    def run(self, model: nn.Module, data: MethodData, config: VBPConfig, ctx: RunContext) -> VBPReport:
        from vitprune.methods.vbp.pipeline import run_vbp

        return run_vbp(model, data, config, ctx)


register_method(VBP())
