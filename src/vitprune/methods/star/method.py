"""STAR as a registered method: ``vitprune prune star``, the chain's ``star`` step and a ``vitprune compare`` arm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitprune.measure.target import MacTarget
from vitprune.methods.star.config import LRP_SETTINGS, WITHOUT_LRP, STARConfig
from vitprune.runs.method import ChainStep, CommandLine, Method, Model, TargetSearch, get_method
from vitprune.training.config import TrainConfig


class STAR(Method, CommandLine, ChainStep, TargetSearch):
    name = "star"
    title = "STAR"
    config = STARConfig
    without = {"lrp": WITHOUT_LRP}
    help = ("STAR: drop patch tokens block by block, ranked by [CLS] attention fused with an LRP prior; ACS keep rates "
            "(the paper fine-tunes 120 epochs: --preset imagenet-star; without a preset at a batch of 64).")
    #: Without --preset: the paper's schedule without DeiT's augmentation and EMA, which need image data and GPUs, at
    #: a batch of 64 (the paper's 2048 needs several GPUs).
    recipe = TrainConfig(**{k: getattr(STARConfig().finetune, k) for k in ("epochs", "lr", "min_lr", "batch_size")})
    train_batch = 64
    renderer = "vitprune.methods.star.render:render_star"
    summary = ("rho", "keep_rates")
    fixed = {"finetune": None}
    settings = "STARConfig's fields: rho, target_macs (with above) or rates, alpha, adaptive, ..."

    def defaults(self, settings: dict[str, Any]) -> dict[str, Any]:
        # rho's default (0.7) gives way to a MAC target or hand-set rates.
        return {"rho": None} if {"target_macs", "rates"} & set(settings) else {}

    def search_cost(self, model: Model, step: dict[str, Any], images: int, val_images: int
                    ) -> tuple[float, float]:
        # The ACS pass and the a-STAR MAC average are forward passes; LRP propagates relevance back from each of the
        # top classes of each image, about a training step each.
        config = STARConfig(**{k: v for k, v in step.items() if k in ("acs_images", "lrp_images", "classes",
                                                                      "mac_images")})
        alpha = step.get("alpha", STARConfig.alpha)
        lrp = min(config.lrp_images, images) * config.classes if alpha < 1 and step.get("prior") is None else 0
        return float(lrp), float(min(config.acs_images, images) + config.mac_images)

    def reuse(self, step: dict[str, Any], earlier: dict[str, Any], step_dir: Path) -> dict[str, Any]:
        """The LRP prior an earlier step computed with the same LRP settings (the runner offers only a step on the
        same model): every target's STAR arm and every speedup probe on the dense model share one."""
        from vitprune.methods.star.pipeline import INTER_FILE

        def weighted(settings: dict[str, Any]) -> bool:
            return settings.get("alpha", STARConfig.alpha) < 1

        same = all(step.get(name) == earlier.get(name) for name in LRP_SETTINGS)
        fits = same and weighted(step) and weighted(earlier) and step.get("prior") is None
        return {"prior": str(step_dir / INTER_FILE)} if fits else {}

    def target_steps(self, model: Model, target: MacTarget, effort: str, *, exact: bool = True
                     ) -> list[dict[str, Any]]:
        """STAR's bisection on rho, then, with ``exact``, VBP's neuron trim to the target: the STAR step stops at the
        last schedule above it (keep rates move in whole tokens)."""
        from vitprune.adapters import get_adapter

        # [CLS] attention alone where the family propagates no relevance.
        alpha = STARConfig.alpha if "lrp" in get_adapter(model).capabilities else 1.0
        images = {"acs_images": 64, "lrp_images": 64} if effort == "quick" else {}
        star = {"method": self.name, "target_macs": target.to_json(), "alpha": alpha, **images}
        if not exact:
            return [star]
        return [{**star, "above": True}, *get_method("vbp").target_steps(model, target, effort)]
