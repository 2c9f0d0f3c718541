"""VBP as a registered method: ``vitprune prune vbp``, the chain's ``vbp`` step and a ``vitprune compare`` arm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitprune.measure.target import MacTarget
from vitprune.methods.vbp.config import REQUIRES, STATISTICS_SETTINGS, VBPConfig
from vitprune.runs.method import ChainStep, CommandLine, Method, Model, TargetSearch


class VBP(Method, CommandLine, ChainStep, TargetSearch):
    name = "vbp"
    title = "VBP"
    config = VBPConfig
    help = ("VBP: remove the MLP neurons of lowest activation variance network-wide, fold their means; fine-tune if "
            "asked (the paper: 10 epochs of its recipe, --preset imagenet-vbp).")
    #: Without --preset the command line fine-tunes on the paper's schedule, for --epochs.
    recipe = VBPConfig().finetune
    renderer = "vitprune.methods.vbp.render:render_vbp"
    summary = ("removed", "widths")
    fixed = {"finetune": None}
    settings = "VBPConfig's fields: ratio or target_macs, criterion, compensate, calibration_images, ..."

    def requires(self, config: VBPConfig) -> tuple[str, ...]:
        return REQUIRES

    def defaults(self, settings: dict[str, Any]) -> dict[str, Any]:
        # ratio's default (0.5) gives way to a MAC target.
        return {"ratio": None} if "target_macs" in settings else {}

    def search_cost(self, model: Model, step: dict[str, Any], images: int, val_images: int
                    ) -> tuple[float, float]:
        # one pass for the statistics, unless an earlier step's are taken
        given = step.get("statistics") is not None
        return 0.0, 0.0 if given else float(min(step.get("calibration_images") or images, images))

    def reuse(self, step: dict[str, Any], earlier: dict[str, Any], step_dir: Path) -> dict[str, Any]:
        """The activation statistics an earlier step computed on the same calibration images (the runner offers only
        a step on the same model): every target's VBP arm and every speedup probe on the dense model share them."""
        from vitprune.methods.vbp.pipeline import STATISTICS_FILE

        def computed(settings: dict[str, Any]) -> bool:
            return VBPConfig(**{k: v for k, v in settings.items() if k in ("criterion", "compensate")}
                             ).needs_statistics

        same = all(step.get(name) == earlier.get(name) for name in STATISTICS_SETTINGS)
        fits = same and computed(step) and computed(earlier) and step.get("statistics") is None
        return {"statistics": str(step_dir / STATISTICS_FILE)} if fits else {}

    def target_steps(self, model: Model, target: MacTarget, effort: str, *, exact: bool = True
                     ) -> list[dict[str, Any]]:
        # quick and standard: statistics on a class-balanced subset, as the claims page takes them
        images = {"quick": 256, "standard": 2048, "paper": None}[effort]
        return [{"method": self.name, "target_macs": target.to_json(), "calibration_images": images}]
