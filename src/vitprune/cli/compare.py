"""``vitprune compare``: every applicable method at the same MAC target(s), recovered alike, measured side by
side."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from vitprune.cli.app import MODEL_HELP, app, console, err_console, print_json
from vitprune.cli.options import SEED_OPT, RunInputs, distributed, load_inputs, run_groups
from vitprune.measure import format_count
from vitprune.training.config import TRAINING_HELP


def _model_words(model: str, run: RunInputs, seed: int) -> str:
    """MODEL as the command that reproduces an arm names it: with the options that chose its weights."""
    words = [model]
    if run.source.checkpoint is not None:
        words += ["--checkpoint", str(run.source.checkpoint)]
    if not run.source.pretrained:
        words.append("--no-pretrained")
    if seed:
        words += ["--seed", str(seed)]
    return " ".join(words)


class BudgetName(str, Enum):
    quick = "quick"
    standard = "standard"
    paper = "paper"


@app.command()
@run_groups
def compare(
    model: str = typer.Argument(..., help=MODEL_HELP),
    macs: Optional[list[float]] = typer.Option(None, "--macs", help="Target share of MODEL's MACs per image (full "
                                                                    "convention), e.g. 0.6; repeat for several."),
    speedup: Optional[list[float]] = typer.Option(None, "--speedup", help="Target speedup over MODEL measured on this "
                                                                          "machine (--speed-batch, --repeats), e.g. "
                                                                          "1.5; repeat for several."),
    budget: BudgetName = typer.Option(BudgetName.quick, "--budget",
                                      help="quick (1 recovery epoch on 2,000 images; minutes on a CPU for a small "
                                           "model), standard (10 epochs on every image) or paper (the HetDPT "
                                           "paper's 400-epoch DeiT recipe, each search at its paper's settings)."),
    epochs: Optional[int] = typer.Option(None, "--epochs", min=1, help=TRAINING_HELP["epochs"]),
    arms: Optional[str] = typer.Option(None, "--arms", help="Comma-separated arms to run (default: every one; "
                                                            "docs/compare.md lists them)."),
    out: Path = typer.Option(..., "--out", help="Run directory: arms/, report.json, report.md, pareto.png."),
    seed: int = SEED_OPT,
    run: RunInputs = ...,
) -> None:
    """Bring every method MODEL's family supports (and the chains that fit) to each --macs or --speedup target by its
    own rate search, recover each the same way, and compare them with the dense model given the same recovery: top-1
    with its interval, params, MACs, measured speedup, wall time, paired statistics and the best arm's command."""
    from vitprune.comparison.arms import check_arms
    from vitprune.comparison.budget import get_budget
    from vitprune.comparison.report import Target
    from vitprune.comparison.run import check_targets
    from vitprune.comparison.run import compare as run_compare

    chosen = [name.strip() for name in arms.split(",") if name.strip()] if arms else None
    # before the data loads
    check_arms(chosen)
    check_targets(macs, speedup, run.speed)
    plan = get_budget(budget.value, epochs=epochs)
    ctx = distributed(run.source.device)
    output = run.output
    dense, sets = load_inputs(model, run.source, run.data, seed=seed, splits=("train", "val", "calibration"))
    report = run_compare(dense, sets["train"], sets["val"], macs, speedup=speedup, run_dir=out,
                         calibration_set=sets["calibration"], budget=plan, arms=chosen, seed=seed,
                         name=_model_words(model, run, seed), data=run.data.data,
                         device=ctx.device, progress=not output.json and ctx.is_main, resume=output.resume,
                         log=(lambda _m: None) if output.json else err_console.print, speed=run.speed, dist=ctx)
    if not ctx.is_main:
        return
    if output.json:
        print_json(report.to_dict())
        return
    for label in report.targets:
        target = Target.parse(label)
        table = Table("arm", "top-1 % [95%]", "params", "MACs (share)", "speedup [IQR]", "wall", "status",
                      title=f"{target.describe()} (starting checkpoint: {model}; MACs: full convention)")
        for row in [*(r for r in report.arms if r.target == label), report.control]:
            if row.status != "done":
                table.add_row(row.arm, "", "", "", "", "", f"{row.status}: {row.reason}")
                continue
            table.add_row(row.arm, f"{row.top1:.2f} [{row.interval[0]:.2f}, {row.interval[1]:.2f}]",
                          format_count(row.params), f"{format_count(row.macs)} ({row.macs_share:.1%})",
                          "–" if row.speedup is None else f"{row.speedup:.2f}× [{row.speedup_q1:.2f}, "
                                                          f"{row.speedup_q3:.2f}]",
                          f"{row.seconds:.0f} s", {None: "control", True: "on target", False: "off target"}[row.met])
        console.print(table)
        best = report.best[label]
        console.print(f"best at {target.describe()}: {best['arm']} ({best['top1']:.2f}% top-1); alone: "
                      f"{best['command']}" if best else f"no arm reached {target.describe()}")
    console.print(f"report: {out / 'report.md'}, plot: {out / 'pareto.png'}, JSON: {out / 'report.json'}")
