"""``vitprune chain``: any sequence of methods from a chain file, with fine-tuning where the file puts it (and the
runner ``vitprune prune hetdpt+`` shares)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from vitprune.cli.app import MODEL_HELP, app, err_console
from vitprune.cli.config_options import config_options
from vitprune.cli.options import SEED_OPT, RunInputs, distributed, load_inputs, run_groups
from vitprune.cli.render import show_report
from vitprune.errors import VitpruneError
from vitprune.methods.hetdpt.config import HetDPTBudget, preset_for

if TYPE_CHECKING:
    from vitprune.runs.steps import ChainConfig


@app.command()
@run_groups
@config_options(HetDPTBudget, param="hetdpt", fields=("preset",))
def chain(
    model: str = typer.Argument(..., help=MODEL_HELP),
    steps: Path = typer.Option(..., "--steps", help='Chain file (JSON): a list of steps such as {"method": "depth", '
                                                     '"attention": [0, 3]}, or {"steps": [...]} with a seed and '
                                                     'train_images; see docs/recipes.md.'),
    out: Path = typer.Option(..., "--out", help="Run directory: chain.json, steps/NN-METHOD/, model/, report.json."),
    hetdpt: HetDPTBudget = ...,
    onnx: bool = typer.Option(True, "--onnx/--no-onnx", help="Check that the final model exports to ONNX."),
    seed: int = SEED_OPT,
    run: RunInputs = ...,
) -> None:
    """Run a chain of methods (depth, hetdpt, hetdpt+, merge, width, vbp, star, hiap, finetune) in order; check and time
    the result. A step that names a seed keeps it; the others take the chain file's seed, else --seed (which also
    draws a --no-pretrained MODEL's weights)."""
    from vitprune.runs.render import render_chain
    from vitprune.runs.steps import load_chain

    config = load_chain(steps, seed=seed, preset=preset_for(hetdpt.preset, run.data.data), onnx=onnx)
    run_chain_command(model, config, run, out=out, seed=seed, render=render_chain)


def run_chain_command(model: str, config: ChainConfig, run: RunInputs, *, out: Path, seed: int,
                      render: Callable[[Any, str, Any], None]) -> None:
    """Load MODEL (random weights drawn under ``seed``) and --data (with the calibration images VBP and STAR steps
    use), run the chain ``config`` into --out and show the report through ``render``."""
    from vitprune.consistency import failed_checks
    from vitprune.runs.chain import run_chain
    from vitprune.runs.context import MethodData, RunContext

    ctx = distributed(run.source.device)
    output = run.output
    dense, sets = load_inputs(model, run.source, run.data, seed=seed, splits=("train", "val", "calibration"))
    report = run_chain(dense, MethodData(**sets), config, RunContext(
        out, device=ctx.device, progress=not output.json and ctx.is_main, resume=output.resume,
        log=(lambda _m: None) if output.json else err_console.print, speed=run.speed, dist=ctx, name=model))
    show_report(model, report, render, output.json)
    if not report.consistency["ok"]:
        failed = ", ".join(failed_checks(report.consistency))
        raise VitpruneError(f"the final model failed its consistency check ({failed}); the model and "
                            f"{out / 'report.json'} are kept for inspection")
