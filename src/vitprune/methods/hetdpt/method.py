"""HetDPT and its merge as registered methods: ``vitprune prune hetdpt``, ``vitprune prune merge`` and the chain's
``hetdpt`` and ``merge`` steps."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitprune.errors import VitpruneError
from vitprune.methods.base import Method, MethodData, RunContext, check_known, register_method, split_settings
from vitprune.methods.hetdpt.config import REQUIRES, HetDPTConfig, MergeConfig, StageOverrides

if TYPE_CHECKING:
    from torch import nn

    from vitprune.methods.hetdpt.merge import MergeReport
    from vitprune.methods.hetdpt.pipeline import HetDPTReport


@dataclass
class HetDPTRun:
    """Everything a HetDPT run needs: the layer budget, the split (``None``: the predictor's), an earlier run's
    predictor to reuse, and the pipeline's settings."""

    budget: int
    split: tuple[int, int] | None
    config: HetDPTConfig
    predictor: str | Path | None = None


#: A HetDPT step's own settings (not the config's): the layer budget, the split, the preset, a predictor to reuse and
#: whether the step recovers (HetDPT's Stage 2; by default a chain fine-tunes only in its finetune steps).
_OWN = {"budget", "split", "preset", "predictor", "recover"}


class HetDPT(Method):
    name = "hetdpt"
    title = "HetDPT"
    help = "HetDPT: how many attention/GELU layers to remove (predictor), which (learned importance); fine-tune, merge."
    config = HetDPTRun
    summary = ("attention", "activation", "split")
    settings = ("budget, split ([A, G] or 'auto'), predictor (an earlier run's predictor.json), preset, recover "
                "(HetDPT's Stage 2; then epochs and lr too), probe_epochs, search_epochs, batch_size and "
                "HetDPTConfig's other fields")

    def configure(self, settings: dict[str, Any], preset: str) -> HetDPTRun:
        from vitprune.methods.hetdpt.pipeline import STEP_OVERRIDES, configure, parse_split

        own, changes = split_settings(settings, _OWN)
        recover = own.get("recover", False)
        if not isinstance(recover, bool):
            raise VitpruneError("hetdpt step: recover (run HetDPT's Stage-2 fine-tune before the merge) must be true "
                                "or false")
        # A step without Stage 2 takes only Steps 1 and 2's stage shortcuts.
        shortcuts = {f.name for f in fields(StageOverrides)} if recover else set(STEP_OVERRIDES)
        check_known(changes, {*shortcuts, *(f.name for f in fields(HetDPTConfig))} - {"probe", "search", "finetune"},
                    self.name)
        if not isinstance(own.get("budget"), int):
            raise VitpruneError("hetdpt step: budget (layers to remove: attention + activation) must be an integer")
        split = own.get("split", "auto")
        config = configure(own.get("preset", preset), **changes)
        if not recover:
            config.finetune = None
        config.validate()
        return HetDPTRun(own["budget"], parse_split(split if isinstance(split, str) else ",".join(map(str, split))),
                         config, own.get("predictor"))

    def requires(self, config: HetDPTRun) -> tuple[str, ...]:
        return REQUIRES

    def run(self, model: nn.Module, data: MethodData, config: HetDPTRun, ctx: RunContext) -> HetDPTReport:
        from vitprune.methods.hetdpt.pipeline import run_hetdpt

        return run_hetdpt(model, data.train, data.val, budget=config.budget, split=config.split,
                          predictor=config.predictor, config=config.config, calibration_set=data.calibration,
                          **ctx.pipeline_options())

    def summarize(self, report: HetDPTReport, config: HetDPTRun) -> dict[str, Any]:
        recovered = {"top1": report.top1} if config.config.finetune is not None else {}
        return {**super().summarize(report, config), **recovered}


class Merge(Method):
    name = "merge"
    title = "merging"
    help = "Merge each fc1·fc2 pair left apart by a removed activation into one Linear (exact); show before/after."
    model_help = "A model saved with fc1 and fc2 apart (`prune hetdpt --no-merge`, fine-tuned since or not)."
    config = MergeConfig
    data = ()
    out_is_model = True
    seeded = False
    summary = ("merged_blocks", "max_abs_difference")

    def run(self, model: nn.Module, data: MethodData, config: MergeConfig, ctx: RunContext) -> MergeReport:
        from vitprune.methods.hetdpt.merge import run_merge

        return run_merge(model, out=ctx.run_dir, fold_norm=config.fold_norm, name=ctx.name, speed=ctx.speed,
                         device=ctx.device, progress=ctx.progress, dist=ctx.dist)

    def title_of(self, report: Any) -> str:
        return (f"fc1·fc2 merged in blocks {report.merged_blocks} (largest output change "
                f"{report.max_abs_difference:.2g})")


register_method(HetDPT())
register_method(Merge())
