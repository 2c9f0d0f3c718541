"""``vitprune compare``: every applicable method at the same MAC target(s), recovered alike, measured side by
side."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

import typer
from rich.table import Table

from vitprune.cli.app import MODEL_HELP, app, console, err_console, print_json
from vitprune.cli.config_options import config_options
from vitprune.cli.options import RunInputs, distributed, load_inputs, run_groups
from vitprune.comparison.config import CompareConfig
from vitprune.measure import format_count


def _model_words(model: str, run: RunInputs, seed: int) -> str:
    """MODEL as the command that reproduces an arm names it: with the options that chose its weights."""
    words = [model]
    if run.source.checkpoint is not None:
        words += ["--checkpoint", str(run.source.checkpoint)]
    if not run.source.pretrained:
        words.append("--no-pretrained")
    if seed:
        words += ["--seed", str(seed)]
    return shlex.join(words)


def _data_words(run: RunInputs) -> str:
    """--data as the command that reproduces an arm names it: with the options that chose its images."""
    data = run.data
    words = [data.data]
    if data.data_root is not None:
        words += ["--data-root", str(data.data_root)]
    if data.val_split is not None:
        words += ["--val-split", str(data.val_split)]
    return shlex.join(words)


@app.command()
@run_groups
@config_options(CompareConfig)
def compare(
    model: str = typer.Argument(..., help=MODEL_HELP),
    config: CompareConfig = ...,
    out: Path = typer.Option(..., "--out", help="Run directory: arms/, report.json, report.md, pareto.png."),
    run: RunInputs = ...,
) -> None:
    """Bring every method MODEL's family supports (and the chains that fit) to each --target-macs or --speedup target by
    its own rate search, recover each the same way, and compare them with the dense model given the same recovery:
    top-1 with its interval, params, MACs, measured speedup, wall time; pick per target by --objective (speed: the
    fastest arm shown within --tolerance points of the most accurate), its paired verdicts and its command."""
    from vitprune.comparison.arms import check_arms
    from vitprune.comparison.config import check_targets
    from vitprune.comparison.report import Target
    from vitprune.comparison.run import compare as run_compare
    from vitprune.runs.context import MethodData, RunContext

    # before the data loads
    check_arms(config.arms)
    check_targets(config.target_macs, config.speedup, run.speed)
    config.resolved_budget()
    config = replace(config, model=_model_words(model, run, config.seed), data=_data_words(run))
    ctx = distributed(run.source.device)
    output = run.output
    dense, sets = load_inputs(model, run.source, run.data, seed=config.seed, splits=("train", "val", "calibration"))
    report = run_compare(dense, MethodData(**sets), config, RunContext(
        out, device=ctx.device, progress=not output.json and ctx.is_main, resume=output.resume,
        log=(lambda _m: None) if output.json else err_console.print, speed=run.speed, dist=ctx, name=model))
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
                          f"{row.seconds:.0f} s", {None: "control", True: "on target", False: row.reason}[row.met])
        console.print(table)
        chosen = report.pick[label]
        if chosen is None:
            console.print(f"no arm reached {target.describe()}")
            continue
        console.print(f"[bold]pick at {target.describe()}: {chosen['arm']}[/] ({chosen['top1']:.2f}% top-1): "
                      f"{chosen['why']}")
        console.print("  vs " + "; ".join(f"{v['b']}: {v['verdict']} ({v['effect']:+.2f} points)"
                                          for v in chosen["verdicts"]))
        console.print(f"  alone (seed {chosen['seed']}): {chosen['command']}")
    console.print(f"report: {out / 'report.md'}, plot: {out / 'pareto.png'}, JSON: {out / 'report.json'}")
