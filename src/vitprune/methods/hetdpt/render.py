"""HetDPT's printed report: the split and the layers it chose, the predictor's fit, and what it gained."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vitprune.runs.render import percent, render_gains

if TYPE_CHECKING:
    from rich.console import Console

    from vitprune.methods.hetdpt.pipeline import HetDPTReport


def render_hetdpt(console: Console, model: str, report: HetDPTReport) -> None:
    """What HetDPT chose and what it gained: indices, predictor, accuracy, params, MACs, measured speed."""
    split, predictor = report.split, report.predictor
    console.print(f"[bold]HetDPT on {model}[/] (starting checkpoint: {model}): budget {report.budget} layers = "
                  f"{split['attention']} attention + {split['activation']} activation (chosen by {split['chosen_by']})")
    merged = ("fc1·fc2 merged" if report.merged_blocks == report.activation
              else "fc1·fc2 kept apart, for `vitprune prune merge`")
    console.print(f"attention removed in blocks {report.attention}; activation removed ({merged}) in "
                  f"blocks {report.activation}")
    if predictor is not None:
        fit = predictor["fit"]
        line = ", ".join(f"{p['attention']}+{p['activation']}: {p['predicted']:.2f}"
                         for p in predictor["split"]["line"])
        console.print(f"predictor: degree {fit['degree']} polynomial, L2OCV MAE {fit['mae']:.3f} / RMSE "
                      f"{fit['rmse']:.3f} over {len(fit['points'])} points; predicted top-1 along the budget line: "
                      f"{line}")
    top1 = report.top1
    render_gains(console, model, "HetDPT",
                 f"{percent(top1['finetuned'])} (right after removal {percent(top1['pruned'])})", report)
