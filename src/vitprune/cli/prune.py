"""``vitprune prune hetdpt``, whose options change a preset's (HetDPT's Stage-2 recipe) rather than a config's
defaults; every other method's command is generated (:mod:`vitprune.cli.methods`)."""

from __future__ import annotations

from pathlib import Path

import typer

from vitprune.cli.app import MODEL_HELP, err_console
from vitprune.cli.config_options import config_options
from vitprune.cli.methods import prune_app
from vitprune.cli.options import DataSource, ModelSource, RunOutput, distributed, load_inputs, run_groups
from vitprune.cli.render import show_report
from vitprune.measure import SpeedConfig
from vitprune.methods.hetdpt.config import HetDPTBudget, HetDPTConfig, StageOverrides


def hetdpt_preset_for(preset: str | None, data: str) -> str:
    """HetDPT's preset: the one asked for, else ``digits`` for vitprune's own small datasets (digits, cluttered-mnist)
    and ``imagenet-hetdpt`` for any other."""
    return preset or ("digits" if data in ("digits", "cluttered-mnist") else "imagenet-hetdpt")


@prune_app.command()
@run_groups
@config_options(HetDPTBudget, param="choice")
@config_options(HetDPTConfig, overrides=True)
@config_options(StageOverrides, param="stages", overrides=True)
def hetdpt(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: DataSource = ...,
    choice: HetDPTBudget = ...,
    out: Path = typer.Option(..., "--out", help="Run directory: stage results, fine-tuning run, model/, report."),
    stages: dict = ...,
    config: dict = ...,
    source: ModelSource = ...,
    speed: SpeedConfig = ...,
    output: RunOutput = ...,
) -> None:
    """HetDPT: how many attention/GELU layers to remove (predictor), which (learned importance); fine-tune, merge."""
    from vitprune.cli.render import render_hetdpt
    from vitprune.methods.hetdpt.pipeline import configure, parse_split, run_hetdpt

    chosen_split = parse_split(choice.split)
    settings = configure(hetdpt_preset_for(choice.preset, data.data), **stages, **config)
    ctx = distributed(source.device)
    dense, sets = load_inputs(model, source, data, seed=stages.get("seed") or 0,
                              splits=("train", "val", "calibration"))
    report = run_hetdpt(dense, sets["train"], sets["val"], budget=choice.budget, split=chosen_split, run_dir=out,
                        config=settings, device=ctx.device, progress=not output.json and ctx.is_main,
                        resume=output.resume, dist=ctx, predictor=choice.predictor, speed=speed,
                        calibration_set=sets["calibration"],
                        log=(lambda _m: None) if output.json else err_console.print)
    show_report(model, report, render_hetdpt, output.json)
