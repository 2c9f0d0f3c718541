"""``vitprune prune hetdpt`` and ``vitprune prune hetdpt+``, written by hand (their methods'
:attr:`~vitprune.runs.method.CommandLine.handwritten`): their options change a preset's settings (HetDPT's stages)
rather than a config's defaults. Every other method's command is generated (:mod:`vitprune.cli.methods`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import typer

from vitprune.cli.app import MODEL_HELP
from vitprune.cli.chain import run_chain_command
from vitprune.cli.config_options import bundle, config_options
from vitprune.cli.methods import prune_app, run_method
from vitprune.cli.options import RunInputs, run_groups
from vitprune.methods.hetdpt.config import HetDPTBudget, HetDPTConfig, StageOverrides, preset_for
from vitprune.methods.width.config import WidthConfig

F = TypeVar("F", bound=Callable[..., Any])

#: The width settings HetDPT+ takes: all but a ratio (it prunes to a MAC target).
_PLUS_WIDTH = ("target_macs", "convention", "importance", "heads", "head_dims", "embed", "isomorphic", "round_to",
               "taylor_batches", "taylor_batch_size")


def _hetdpt_groups(budget: Iterable[str] | None = None, config: Iterable[str] | None = None) -> Callable[[F], F]:
    """The groups of a HetDPT command: :func:`run_groups`, the budget (``choice``, its fields ``budget``), and
    ``changes``, the options named of HetDPTConfig's fields ``config`` and of the stages' shortcuts: what the command
    changes of the preset's settings."""

    def decorate(command: F) -> F:
        command = bundle("changes", lambda stages, config: {**stages, **config}, ("stages", "config"))(command)
        command = config_options(StageOverrides, param="stages", overrides=True)(command)
        command = config_options(HetDPTConfig, fields=config, overrides=True)(command)
        return run_groups(config_options(HetDPTBudget, param="choice", fields=budget)(command))

    return decorate


@prune_app.command()
@_hetdpt_groups()
def hetdpt(
    model: str = typer.Argument(..., help=MODEL_HELP),
    choice: HetDPTBudget = ...,
    out: Path = typer.Option(..., "--out", help="Run directory: stage results, fine-tuning run, model/, report."),
    changes: dict = ...,
    run: RunInputs = ...,
) -> None:
    """HetDPT: how many attention/GELU layers to remove (predictor), which (learned importance); fine-tune, merge."""
    from vitprune.methods.hetdpt.config import HetDPTRun
    from vitprune.methods.hetdpt.pipeline import configure, parse_split
    from vitprune.runs.method import get_method

    split = parse_split(choice.split)
    settings = configure(preset_for(choice.preset, run.data.data), **changes)
    seed = changes.get("seed") or 0  # StageOverrides' --seed
    run_method(get_method("hetdpt"), model, HetDPTRun(choice.budget, split, settings, choice.predictor), out=out,
               source=run.source, data=run.data, speed=run.speed, output=run.output, seed=seed)


@prune_app.command("hetdpt+")
@_hetdpt_groups(budget=("budget", "split", "preset"), config=("distill",))
@config_options(WidthConfig, param="width", fields=_PLUS_WIDTH, required=("target_macs",))
def hetdpt_plus(
    model: str = typer.Argument(..., help=MODEL_HELP),
    choice: HetDPTBudget = ...,
    width: WidthConfig = ...,
    out: Path = typer.Option(..., "--out", help="Run directory: steps/ (hetdpt, width, finetune), model/, report."),
    changes: dict = ...,
    run: RunInputs = ...,
) -> None:
    """HetDPT+: HetDPT (depth pruning, then its Stage-2 recovery fine-tune and merge), then width pruning of the
    recovered model (Isomorphic Pruning) to --target-macs, then the width recovery fine-tune; both fine-tunes distil
    from the unpruned model with HetDPT's Stage-2 settings."""
    from vitprune.runs.method import get_method

    width.validate()
    method = get_method("hetdpt+")
    plus = method.configure({
        "budget": choice.budget, "target_macs": width.target_macs.to_json(), "split": choice.split,
        "convention": width.convention, "hetdpt": changes, **{k: v for k, v in changes.items() if k == "seed"},
        "width": {k: v for k, v in width.to_dict().items()
                  if k in _PLUS_WIDTH and k not in ("target_macs", "convention")},
    }, preset_for(choice.preset, run.data.data))
    run_chain_command(model, replace(plus, onnx=True), run, out=out, seed=changes.get("seed") or 0,
                      render=method.render)
