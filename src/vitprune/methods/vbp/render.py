"""VBP's printed report: the neurons it removed per block, and what it gained."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vitprune.runs.render import render_gains, retention_cell

if TYPE_CHECKING:
    from rich.console import Console

    from vitprune.methods.vbp.pipeline import VBPReport


def render_vbp(console: Console, model: str, report: VBPReport) -> None:
    """What VBP removed and what it gained: neurons per block, accuracy (retention, fine-tuned), params, MACs, speed."""
    dense_width = max(report.widths_dense.values())
    total = sum(report.widths_dense.values())
    console.print(f"[bold]VBP on {model}[/] (starting checkpoint: {model}): removed {report.removed} of {total} "
                  f"MLP hidden neurons ({report.ratio:.0%}, ranked globally by {report.criterion}), mean-shift "
                  f"compensation {'on' if report.compensate else 'off'}")
    widths = ", ".join(f"{b}: {w}" for b, w in report.widths.items())
    console.print(f"MLP hidden width per block (was {dense_width}): {widths}")
    render_gains(console, model, "VBP", retention_cell(report.top1, report.retention), report)
