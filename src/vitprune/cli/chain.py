"""``vitprune chain`` (any sequence of methods from a chain file, with fine-tuning where the file puts it) and
``vitprune prune hetdpt+`` (the chain HetDPT with its Stage-2 recovery -> width pruning -> fine-tune)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from vitprune.cli.app import MODEL_HELP, app, err_console
from vitprune.cli.config_options import config_options
from vitprune.cli.methods import prune_app
from vitprune.cli.options import DataSource, ModelSource, RunOutput, distributed, load_inputs, run_groups
from vitprune.cli.prune import hetdpt_preset_for
from vitprune.cli.render import show_report
from vitprune.errors import VitpruneError
from vitprune.measure import SpeedConfig
from vitprune.methods.hetdpt.config import HetDPTBudget, HetDPTConfig, StageOverrides
from vitprune.methods.width.config import WidthConfig

#: The width settings HetDPT+ takes: all but a ratio (it prunes to a MAC target).
_PLUS_WIDTH = ("target_macs", "convention", "importance", "heads", "head_dims", "embed", "isomorphic", "round_to",
               "taylor_batches", "taylor_batch_size")


@app.command()
@run_groups
@config_options(HetDPTBudget, param="hetdpt", fields=("preset",))
def chain(
    model: str = typer.Argument(..., help=MODEL_HELP),
    steps: Path = typer.Option(..., "--steps", help='Chain file (JSON): a list of steps such as {"method": "depth", '
                                                     '"attention": [0, 3]}; see docs/recipes.md.'),
    data: DataSource = ...,
    out: Path = typer.Option(..., "--out", help="Run directory: chain.json, steps/NN-METHOD/, model/, report.json."),
    hetdpt: HetDPTBudget = ...,
    onnx: bool = typer.Option(True, "--onnx/--no-onnx", help="Check that the final model exports to ONNX."),
    source: ModelSource = ...,
    seed: int = typer.Option(0, "--seed", help="Seed of a --no-pretrained model's weights and of every step that "
                                               "takes a seed and names none in the chain file."),
    speed: SpeedConfig = ...,
    output: RunOutput = ...,
) -> None:
    """Run a chain of methods (depth, hetdpt, width, vbp, star, hiap, finetune) in order; check and time the result."""
    from vitprune.cli.render import render_chain
    from vitprune.methods.chain import load_chain, seeded

    run_chain_command(model, seeded(load_chain(steps), seed), source=source, data=data, out=out,
                      preset=hetdpt.preset, onnx=onnx, seed=seed, speed=speed, output=output, render=render_chain)


def run_chain_command(model: str, steps: list, *, source: ModelSource, data: DataSource, out: Path,
                      preset: Optional[str], onnx: bool, seed: int, speed: SpeedConfig, output: RunOutput,
                      render) -> None:
    """Load MODEL (random weights drawn under ``seed``) and --data (with the calibration images VBP and STAR steps
    use), run ``steps`` into --out and show the report through ``render``."""
    from vitprune.consistency import failed_checks
    from vitprune.methods.chain import check_chain, run_chain

    preset = hetdpt_preset_for(preset, data.data)
    check_chain(steps, preset)  # before the data loads
    ctx = distributed(source.device)
    dense, sets = load_inputs(model, source, data, seed=seed, splits=("train", "val", "calibration"))
    report = run_chain(dense, sets["train"], sets["val"], steps, run_dir=out, calibration_set=sets["calibration"],
                       device=ctx.device, progress=not output.json and ctx.is_main, resume=output.resume,
                       log=(lambda _m: None) if output.json else err_console.print,
                       preset=preset, speed=speed, onnx=onnx, dist=ctx)
    show_report(model, report, render, output.json)
    if not report.consistency["ok"]:
        failed = ", ".join(failed_checks(report.consistency))
        raise VitpruneError(f"the final model failed its consistency check ({failed}); the model and "
                            f"{out / 'report.json'} are kept for inspection")


@prune_app.command("hetdpt+")
@run_groups
@config_options(HetDPTBudget, param="choice", fields=("budget", "split", "preset"))
@config_options(WidthConfig, param="width", fields=_PLUS_WIDTH, required=("target_macs",))
@config_options(HetDPTConfig, fields=("distill",), overrides=True)
@config_options(StageOverrides, param="stages", overrides=True)
def hetdpt_plus(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: DataSource = ...,
    choice: HetDPTBudget = ...,
    out: Path = typer.Option(..., "--out", help="Run directory: steps/ (hetdpt, width, finetune), model/, report."),
    width: WidthConfig = ...,
    stages: dict = ...,
    config: dict = ...,
    source: ModelSource = ...,
    speed: SpeedConfig = ...,
    output: RunOutput = ...,
) -> None:
    """HetDPT+: HetDPT (depth pruning, then its Stage-2 recovery fine-tune and merge), then width pruning of the
    recovered model (Isomorphic Pruning) to --macs, then the width recovery fine-tune; both fine-tunes distil from
    the unpruned model with HetDPT's Stage-2 settings."""
    from dataclasses import asdict

    from vitprune.cli.render import render_chain
    from vitprune.methods.chain import hetdpt_plus_steps
    from vitprune.methods.hetdpt.pipeline import configure

    width.validate()
    name = hetdpt_preset_for(choice.preset, data.data)
    settings = configure(name, **stages, **config)
    finetune = {**asdict(settings.finetune), "distill": settings.distill, "alpha": settings.alpha,
                "tau": settings.tau}
    hetdpt = {**stages, **config}  # the options named: HetDPT's own Stage 2 takes them all
    seed = stages.get("seed") or 0  # StageOverrides' --seed: every step's, the width step's taylor images included
    steps = hetdpt_plus_steps(budget=choice.budget, target_macs=width.target_macs, split=choice.split, preset=name,
                              convention=width.convention, finetune=finetune, hetdpt=hetdpt,
                              width={**{k: v for k, v in width.to_dict().items()
                                        if k not in ("ratio", "target_macs", "convention")}, "seed": seed})
    run_chain_command(model, steps, source=source, data=data, out=out, preset=name, onnx=True, seed=seed,
                      speed=speed, output=output, render=render_chain)
