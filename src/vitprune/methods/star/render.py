"""STAR's printed report: the keep-rate schedule, and what it gained."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vitprune.runs.render import render_gains, retention_cell

if TYPE_CHECKING:
    from rich.console import Console

    from vitprune.methods.star.pipeline import STARReport


def render_star(console: Console, model: str, report: STARReport) -> None:
    """The keep-rate schedule and what STAR gained: accuracy (right after, fine-tuned), params, MACs, speed."""
    kind = "a-STAR (per-image counts)" if report.adaptive else "STAR"
    rho = "hand-set rates" if report.rho is None else f"rho {report.rho:.4f}"
    console.print(f"[bold]{kind} on {model}[/] (starting checkpoint: {model}): {rho}, alpha {report.alpha}")
    rates = ", ".join(f"{i}: {r:.3f}" for i, r in enumerate(report.keep_rates) if r < 1)
    console.print(f"keep rate per pruning block: {rates or 'none (rho 1 keeps every token)'}")
    if "macs_averaged_over_images" in report.pruned:
        console.print(f"a-STAR's MACs depend on the image: mean over {report.pruned['macs_averaged_over_images']} "
                      "validation images")
    render_gains(console, model, kind, retention_cell(report.top1, report.retention), report)
