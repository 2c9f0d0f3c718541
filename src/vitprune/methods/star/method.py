"""STAR as a registered method: ``vitprune prune star`` and the chain's ``star`` step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitprune.methods.base import Method, MethodData, RunContext, register_method
from vitprune.methods.star.config import STARConfig
from vitprune.training.config import TrainConfig

if TYPE_CHECKING:
    from torch import nn

    from vitprune.methods.star.pipeline import STARReport


class STAR(Method):
    name = "star"
    title = "STAR"
    help = ("STAR: drop patch tokens block by block, ranked by [CLS] attention fused with an LRP prior; ACS keep rates "
            "(the paper fine-tunes 120 epochs: --preset imagenet-star; without a preset at a batch of 64).")
    config = STARConfig
    #: Without --preset: the paper's schedule without DeiT's augmentation and EMA, which need image data and GPUs, at
    #: a batch of 64 (the paper's 2048 needs several GPUs).
    recipe = TrainConfig(**{k: getattr(STARConfig().finetune, k) for k in ("epochs", "lr", "min_lr", "batch_size")})
    train_batch = 64
    fixed = {"finetune": None}
    summary = ("rho", "keep_rates")
    settings = "STARConfig's fields: rho, target_macs or rates, alpha, adaptive, ..."

    def defaults(self, settings: dict[str, Any]) -> dict[str, Any]:
        # rho's default (0.7) gives way to a MAC target or hand-set rates.
        return {"rho": None} if {"target_macs", "rates"} & set(settings) else {}

    compare_skip = None

    def target_steps(self, model: nn.Module, macs: float, effort: str, *, exact: bool = True) -> list[dict[str, Any]]:
        from vitprune.adapters import get_adapter

        # [CLS] attention alone where the family propagates no relevance.
        alpha = STARConfig.alpha if "lrp" in get_adapter(model).capabilities else 1.0
        images = {"acs_images": 64, "lrp_images": 64} if effort == "quick" else {}
        return [{"method": self.name, "target_macs": macs, "alpha": alpha, **images}]

    def run(self, model: nn.Module, data: MethodData, config: STARConfig, ctx: RunContext) -> STARReport:
        from vitprune.methods.star.pipeline import run_star

        return run_star(model, data, config, ctx)


register_method(STAR())
