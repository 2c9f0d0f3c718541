"""ToMe's printed report: the merge schedule, and what it gained."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vitprune.runs.render import render_gains, retention_cell

if TYPE_CHECKING:
    from rich.console import Console

    from vitprune.methods.tome.pipeline import ToMeReport


def render_tome(console: Console, model: str, report: ToMeReport) -> None:
    """The tokens merged and left per block and what ToMe gained: accuracy, params, MACs, speed."""
    schedule = "constant" if report.inflect == 0 else f"inflect {report.inflect:g}"
    attention = "proportional attention" if report.proportional else "plain attention"
    console.print(f"[bold]ToMe on {model}[/] (starting checkpoint: {model}): r {report.r} ({schedule}), {attention}")
    console.print("tokens entering each block: " + ", ".join(map(str, report.tokens)))
    console.print("merged in each block: " + ", ".join(map(str, report.merged)))
    render_gains(console, model, "ToMe", retention_cell(report.top1, report.retention), report)
