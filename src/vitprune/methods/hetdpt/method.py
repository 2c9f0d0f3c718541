"""HetDPT, its merge and HetDPT+ as registered methods: ``vitprune prune hetdpt``, ``vitprune prune merge`` and
``vitprune prune hetdpt+``, the chain's ``hetdpt``, ``merge`` and ``hetdpt+`` steps, and HetDPT's
``vitprune compare`` arm."""

from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitprune.errors import VitpruneError
from vitprune.measure.target import MacTarget
from vitprune.methods.hetdpt.config import REQUIRES, HetDPTConfig, HetDPTRun, MergeConfig, StageOverrides
from vitprune.runs.method import (
    ChainStep, CommandLine, Method, Model, TargetSearch, check_known, get_method, split_settings,
)
from vitprune.runs.steps import ChainConfig, Step

if TYPE_CHECKING:
    from vitprune.methods.hetdpt.merge import MergeReport
    from vitprune.methods.hetdpt.pipeline import HetDPTReport

#: A HetDPT step's own settings (not the config's): the layer budget, the split, the preset, a predictor to reuse and
#: whether the step recovers (HetDPT's Stage 2; by default a chain fine-tunes only in its finetune steps).
_OWN = {"budget", "split", "preset", "predictor", "recover"}


class HetDPT(Method, CommandLine, ChainStep, TargetSearch):
    name = "hetdpt"
    title = "HetDPT"
    config = HetDPTRun
    help = "HetDPT: how many attention/GELU layers to remove (predictor), which (learned importance); fine-tune, merge."
    #: Its options change a preset's settings (cli/prune.py).
    handwritten = True
    renderer = "vitprune.methods.hetdpt.render:render_hetdpt"
    summary = ("attention", "activation", "split")
    settings = ("budget, split ([A, G] or 'auto'), predictor (an earlier run's predictor.json), preset, recover "
                "(HetDPT's Stage 2; then epochs and lr too), probe_epochs, search_epochs, batch_size and "
                "HetDPTConfig's other fields")

    def requires(self, config: HetDPTRun) -> tuple[str, ...]:
        return REQUIRES

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

    def summarize(self, report: HetDPTReport, config: HetDPTRun) -> dict[str, Any]:
        recovered = {"top1": report.top1} if config.config.finetune is not None else {}
        return {**super().summarize(report, config), **recovered}

    def search_cost(self, model: Model, step: dict[str, Any], images: int, val_images: int
                    ) -> tuple[float, float]:
        """Step 1 (unless a predictor or a split is given): a fast fine-tune, a transfer-entropy pass over the
        layers of a type (``te_once``: one pass per type in all) and an evaluation per point, the points of both
        single-type sweeps and the interleaved one, and the dense model's evaluation; Step 2: its search epochs and one
        transfer-entropy pass."""
        from vitprune.adapters import get_adapter

        config = self.configure({k: v for k, v in step.items() if k != "method"}, "digits").config
        layers = len(get_adapter(model).blocks())
        te = layers * min(config.te_images, images)
        train, forward = float(config.search.epochs * images), float(te)
        if step.get("split", "auto") == "auto" and step.get("predictor") is None:
            budget = step["budget"]
            sweep = min(config.sweep_layers or budget, layers)
            rounds = config.interleaved_rounds if config.interleaved_rounds is not None else budget // 2
            points = 2 * sweep + 2 * rounds
            train += points * config.probe.epochs * min(config.probe_images or images, images)
            forward += (2 if config.te_once else points) * te + (points + 1) * val_images
        return train, forward

    def reuse(self, step: dict[str, Any], earlier: dict[str, Any], step_dir: Path) -> dict[str, Any]:
        """Step 1 is the same for every budget up to the one its sweeps reach (``sweep_layers``, else the budget it
        was run for): a step whose settings but a budget no larger are the earlier one's takes its fitted
        predictor.json."""
        from vitprune.methods.hetdpt.pipeline import PREDICTOR_FILE

        same = {k: v for k, v in step.items() if k != "budget"} == {k: v for k, v in earlier.items() if k != "budget"}
        reach = earlier.get("sweep_layers") or earlier["budget"]
        fits = (same and step.get("split", "auto") == "auto" and step.get("predictor") is None
                and step["budget"] <= reach)
        return {"predictor": str(step_dir / PREDICTOR_FILE)} if fits else {}

    def shared_search(self, step: dict[str, Any], planned: list[dict[str, Any]]) -> dict[str, Any]:
        """Step 1's sweeps reach the largest budget ``planned`` has (the interleaved one half of it, unless the
        preset fixes its rounds), so one predictor serves every target's HetDPT steps; a step of a larger budget (a
        speedup target's probe) keeps its own."""
        auto = [s for s in planned if s.get("split", "auto") == "auto" and s.get("predictor") is None]
        reach = max((s["budget"] for s in auto), default=0)
        if step.get("split", "auto") != "auto" or step.get("predictor") is not None or step["budget"] > reach:
            return {}
        preset = self.configure({k: v for k, v in step.items() if k != "method"}, "digits").config
        return {"sweep_layers": reach, **({"interleaved_rounds": reach // 2} if preset.interleaved_rounds is None
                                          else {})}

    def target_steps(self, model: Model, target: MacTarget, effort: str, *, exact: bool = True
                     ) -> list[dict[str, Any]]:
        """As many whole layers as stay above ``target`` (the predictor splits them, Step 2 picks them), then, with
        ``exact``, VBP's neuron trim to the target, as the claims page tops HetDPT up to matched MACs."""
        from vitprune.methods.hetdpt.pipeline import budget_for_macs

        budget = budget_for_macs(model, target)
        # quick: Step 1's fast fine-tunes and the transfer entropy on fewer images, its layers ranked once (TE-Static:
        # on a small model TE every round costs three times the fine-tunes), and one search epoch
        effort_settings = {"quick": {"preset": "digits", "probe_images": 128, "te_images": 64, "te_once": True,
                                     "search_epochs": 1},
                           "standard": {"preset": "digits"}, "paper": {"preset": "imagenet-hetdpt"}}[effort]
        steps = [{"method": self.name, "budget": budget, "split": "auto", **effort_settings}]
        return [*steps, *get_method("vbp").target_steps(model, target, effort)] if exact else steps


class Merge(Method, CommandLine, ChainStep):
    name = "merge"
    title = "merging"
    config = MergeConfig
    entry = "vitprune.methods.hetdpt.merge:run_merge"
    data = ()
    out_is_model = True
    no_target = "is an exact rewrite, not a pruning method"
    help = "Merge each fc1·fc2 pair left apart by a removed activation into one Linear (exact); show before/after."
    model_help = "A model saved with fc1 and fc2 apart (`prune hetdpt --no-merge`, fine-tuned since or not)."
    seeded = False
    summary = ("merged_blocks", "max_abs_difference")

    def title_of(self, report: MergeReport) -> str:
        return (f"fc1·fc2 merged in blocks {report.merged_blocks} (largest output change "
                f"{report.max_abs_difference:.2g})")


def hetdpt_plus_steps(*, budget: int, target_macs: Any, finetune: dict[str, Any], split: list[int] | str = "auto",
                      preset: str | None = None, convention: str = "full", hetdpt: dict[str, Any] | None = None,
                      width: dict[str, Any] | None = None) -> list[Step]:
    """HetDPT+ as a chain, in the paper's order ("upon completion of the two-stage pipeline, we obtain a
    depth-pruned ViT ... we integrate the depth-pruned model with established width pruning"): HetDPT with its
    own Stage 2 (prune, fine-tune with fc1/fc2 apart distilling from the unpruned model, merge; ``hetdpt``:
    further settings of that step, such as ``epochs``), width pruning of that recovered model to ``target_macs`` (a
    MAC target's JSON form or spelling; a share is of the unpruned model) by torch-pruning's Isomorphic Pruning, its
    importance read from the recovered weights, unless ``width`` says otherwise, then the width recovery: one
    fine-tune with ``finetune``'s settings (distilling from the unpruned model unless they say otherwise)."""
    hetdpt = {"budget": budget, "split": split, "recover": True, **({"preset": preset} if preset is not None else {}),
              **(hetdpt or {})}
    return [Step("hetdpt", hetdpt),
            Step("width", {"target_macs": target_macs, "convention": convention, **(width or {})}),
            Step("finetune", {"distill": "soft", **finetune})]


#: A HetDPT+ step's settings: the layer budget and the MAC target, and what changes each stage's defaults.
_PLUS = {"budget", "target_macs", "split", "preset", "convention", "seed", "hetdpt", "width", "finetune"}


class HetDPTPlus(Method, CommandLine, ChainStep):
    name = "hetdpt+"
    title = "HetDPT+"
    config = ChainConfig
    entry = "vitprune.runs.chain:run_chain"
    no_target = "runs in compare as the chain hetdpt → width (without its Stage-2 recovery between them)"
    help = ("HetDPT+: HetDPT with its Stage-2 recovery, then width pruning of the recovered model to a MAC target, "
            "then the width recovery fine-tune (a chain).")
    #: Its options change HetDPT's preset (cli/prune.py).
    handwritten = True
    renderer = "vitprune.runs.render:render_chain"
    settings = ("budget, target_macs (a share of the unpruned model's MACs, or MACs per image), split, preset, "
                "convention, seed, and the settings of each stage: hetdpt (HetDPT's, its Stage 2 included), width "
                "(width pruning's), finetune (the width recovery's; default: HetDPT's Stage-2 fine-tune)")

    def configure(self, settings: dict[str, Any], preset: str) -> ChainConfig:
        from vitprune.methods.hetdpt.pipeline import configure

        check_known(settings, _PLUS, self.name)
        if not isinstance(settings.get("budget"), int):
            raise VitpruneError("hetdpt+ step: budget (layers to remove: attention + activation) must be an integer")
        if settings.get("target_macs") is None:
            raise VitpruneError("hetdpt+ step: target_macs (the MAC target of its width pruning) is missing")
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
        plus = ChainConfig(steps, preset=name, onnx=False)
        plus.validate()
        return plus

    def requires(self, config: ChainConfig) -> tuple[str, ...]:
        return tuple(dict.fromkeys(need for step, step_config in zip(config.steps, config.configs())
                                   for need in get_method(step.method).requires(step_config)))

