"""HetDPT and its merge as registered methods: ``vitprune prune hetdpt``, ``vitprune prune merge`` and the chain's
``hetdpt`` and ``merge`` steps."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitprune.errors import UnreachableTargetError, VitpruneError
from vitprune.methods.base import (
    Method, MethodData, RunContext, check_known, get_method, register_method, split_settings,
)
from vitprune.methods.hetdpt.config import REQUIRES, HetDPTConfig, MergeConfig, StageOverrides

if TYPE_CHECKING:
    from torch import nn

    from vitprune.methods.chain import ChainReport, Step
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

    compare_skip = None

    def target_steps(self, model: nn.Module, macs: float, effort: str, *, exact: bool = True) -> list[dict[str, Any]]:
        """As many whole layers as fit above ``macs`` (the predictor splits them, Step 2 picks them), then, with
        ``exact``, VBP's neuron trim to the target, as the claims page tops HetDPT up to matched MACs."""
        from vitprune.methods.hetdpt.pipeline import budget_for_macs

        budget = budget_for_macs(model, macs)
        if budget == 0:
            raise UnreachableTargetError("HetDPT removes whole layers, and the smallest removal goes below the target")
        # quick: Step 1's fast fine-tunes and the transfer entropy on fewer images, and one search epoch
        effort_settings = {"quick": {"preset": "digits", "probe_images": 128, "te_images": 64, "search_epochs": 1},
                           "standard": {"preset": "digits"}, "paper": {"preset": "imagenet-hetdpt"}}[effort]
        steps = [{"method": self.name, "budget": budget, "split": "auto", **effort_settings}]
        return [*steps, *get_method("vbp").target_steps(model, macs, effort)] if exact else steps

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
    compare_skip = "is an exact rewrite, not a pruning method"
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


@dataclass
class HetDPTPlusRun:
    """HetDPT+ as the chain it runs (:func:`~vitprune.methods.chain.hetdpt_plus_steps`) and HetDPT's preset."""

    steps: list[Step]
    preset: str
    #: Each step's config (:func:`~vitprune.methods.chain.check_chain`'s).
    configs: list[Any] = field(default_factory=list, repr=False)


#: A HetDPT+ step's settings: the layer budget and the MAC target, and what changes each stage's defaults.
_PLUS = {"budget", "target_macs", "split", "preset", "convention", "seed", "hetdpt", "width", "finetune"}


class HetDPTPlus(Method):
    name = "hetdpt+"
    title = "HetDPT+"
    help = ("HetDPT+: HetDPT with its Stage-2 recovery, then width pruning of the recovered model to a MAC target, "
            "then the width recovery fine-tune (a chain).")
    config = HetDPTPlusRun
    #: ``vitprune prune hetdpt+`` is its own command: its options change HetDPT's preset (cli/prune.py).
    command = False
    compare_skip = "runs in compare as the chain hetdpt → width (without its Stage-2 recovery between them)"
    settings = ("budget, target_macs (MACs per image), split, preset, convention, seed, and the settings of each "
                "stage: hetdpt (HetDPT's, its Stage 2 included), width (width pruning's), finetune (the width "
                "recovery's; default: HetDPT's Stage-2 fine-tune)")

    def configure(self, settings: dict[str, Any], preset: str) -> HetDPTPlusRun:
        from dataclasses import asdict

        from vitprune.methods.chain import check_chain, hetdpt_plus_steps
        from vitprune.methods.hetdpt.pipeline import configure

        check_known(settings, _PLUS, self.name)
        for name, kind in (("budget", int), ("target_macs", (int, float))):
            if not isinstance(settings.get(name), kind):
                raise VitpruneError(f"hetdpt+ step: {name} must be a number")
        name = settings.get("preset", preset)
        # StageOverrides' seed, every stage's; unnamed, the preset's own (and the width step's images: 0).
        hetdpt = {**{k: v for k, v in settings.items() if k == "seed"}, **settings.get("hetdpt", {})}
        stage2 = configure(name, **hetdpt)
        finetune = {**asdict(stage2.finetune), "distill": stage2.distill, "alpha": stage2.alpha, "tau": stage2.tau,
                    **settings.get("finetune", {})}
        steps = hetdpt_plus_steps(budget=settings["budget"], target_macs=settings["target_macs"],
                                  split=settings.get("split", "auto"), preset=name,
                                  convention=settings.get("convention", "full"), finetune=finetune, hetdpt=hetdpt,
                                  width={"seed": hetdpt.get("seed") or 0, **settings.get("width", {})})
        return HetDPTPlusRun(steps, name, check_chain(steps, name))

    def requires(self, config: HetDPTPlusRun) -> tuple[str, ...]:
        return tuple(dict.fromkeys(need for step, step_config in zip(config.steps, config.configs)
                                   for need in get_method(step.method).requires(step_config)))

    def run(self, model: nn.Module, data: MethodData, config: HetDPTPlusRun, ctx: RunContext) -> ChainReport:
        from vitprune.methods.chain import run_chain

        return run_chain(model, data.train, data.val, config.steps, calibration_set=data.calibration,
                         preset=config.preset, onnx=False, **ctx.pipeline_options())


register_method(HetDPT())
register_method(Merge())
register_method(HetDPTPlus())
