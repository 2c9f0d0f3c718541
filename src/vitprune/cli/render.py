"""Rich tables for the commands' own human-readable output (a profile, a timing, an evaluation, the training a run
used), and how a command shows a method's report. Every table says what it measured and how; the views of the methods'
reports are in :mod:`vitprune.runs.render` and the methods' folders."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.table import Table

from vitprune.cli.app import console, print_json
from vitprune.measure import format_count
from vitprune.runs.render import context_line, percent, warn_if_busy

if TYPE_CHECKING:  # these modules import torch: the commands import them when they run
    from vitprune.measure import MacReport, SpeedResult
    from vitprune.runs.report import Report
    from vitprune.training.config import TrainConfig


def render_profile(model: str, report: MacReport) -> None:
    """Per-block MACs and the totals, titled with the convention (the linear one has no attention-matmul column)."""
    c, h, w = report.input_size
    full = report.convention == "full"
    columns = ["block", "tokens", "heads", "mlp hidden", "attn linear", *(["attn matmul"] if full else []), "mlp",
               "total"]
    table = Table(*columns, title=f"{model}: MACs per image at {c}x{h}x{w}, convention '{report.convention}' "
                                  f"({report.convention_description})")
    table.columns[0].no_wrap = True
    for b in report.blocks:
        matmul = [format_count(b.attn_matmul)] if full else []
        table.add_row(str(b.index), str(b.tokens), str(b.heads), "-" if b.mlp_hidden is None else str(b.mlp_hidden),
                      format_count(b.attn_linear), *matmul, format_count(b.mlp), format_count(b.total(report.convention)))
    for name, macs in report.other.items():
        table.add_row(name, *[""] * (len(columns) - 2), format_count(macs))
    console.print(table)
    console.print(f"[bold]MACs ({report.convention}):[/] {format_count(report.macs)} ({report.macs:,})   "
                  f"[bold]params:[/] {format_count(report.params)} ({report.params:,})")


def render_speed(model: str, result: SpeedResult) -> None:
    """Median latency per batch with its spread, and the throughput it implies."""
    s = result.spread
    table = Table("model", "median ms/batch", "IQR ms", "min–max ms", "images/s", title=context_line(result.to_dict()))
    table.add_row(model, f"{s.median:.2f}", f"{s.q1:.2f}–{s.q3:.2f}", f"{s.min:.2f}–{s.max:.2f}",
                  f"{result.throughput:.1f}")
    console.print(table)
    warn_if_busy(console, result.to_dict())


def render_eval(model: str, data: str, split: str, metrics: dict) -> None:
    """Accuracy and loss on one split."""
    table = Table("model", "data", "images", "top-1", "top-5", "loss")
    top5 = metrics.get("top5")
    table.add_row(model, f"{data}/{split}", str(metrics["count"]), percent(metrics['top1']),
                  percent(top5), "-" if metrics.get("loss") is None else f"{metrics['loss']:.4f}")
    console.print(table)


def render_lr(train: TrainConfig, recipe: TrainConfig) -> None:
    """Under a report, the peak lr the run trained at and how it follows from the ``recipe``'s (the JSON report's
    ``config`` holds it)."""
    how = ("the recipe's" if train.lr == recipe.lr and train.batch_size == recipe.batch_size
           else "scaled with the batch" if train.lr == recipe.at_batch(train.batch_size).lr else "given")
    console.print(f"trained at lr {train.lr:.3g} for a global batch of {train.batch_size} ({how}; the recipe: "
                  f"{recipe.lr:.3g} at {recipe.batch_size})")


def show_report(model: str, report: Report, render: Callable[[Any, str, Any], None], json_out: bool) -> None:
    """Print a run's report, naming MODEL: as JSON (the report's keys, then ``model``), or through ``render(console,
    model, report)``."""
    if json_out:
        print_json({**report.to_dict(), "model": model})
    else:
        render(console, model, report)
