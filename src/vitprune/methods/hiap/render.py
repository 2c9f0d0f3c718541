"""HiAP's printed views: the live view after each training epoch, and the report of what it kept and gained."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from vitprune.measure.config import format_count
from vitprune.runs.render import percent, render_gains, share

if TYPE_CHECKING:
    from rich.console import Console

    from vitprune.methods.hiap.pipeline import HiAPReport


def render_hiap_epoch(console: Console, stats: dict) -> None:
    """The live view after each HiAP epoch: MACs (expected, hardened) against the budget, and per block the
    heads, value dims and neurons the hardened gates keep (expected counts in brackets)."""
    # With a target the extraction hardens at the threshold that lands on it, not the paper's 0: show both.
    target_macs = stats.get("target_macs")
    target = "" if target_macs is None else (
        f", extracted now {format_count(stats['macs_extracted']) if stats.get('macs_extracted') else 'over'} / target "
        f"{format_count(target_macs)}")
    console.print(
        f"epoch {stats['epoch']}: MACs expected {format_count(stats['macs_expected_exact'])} (exact), hardened at 0 "
        f"{format_count(stats['macs_hardened'])}{target}; τ {stats['tau']:.2f}, λ scale {stats['lambda_scale']:.2f}, "
        f"undecided gates {100 * stats['undecided']:.0f}%, hardened val top-1 "
        f"{percent(stats.get('val_top1'))}")
    console.print("  " + "  ".join(_layer_cell(i, layer) for i, layer in enumerate(stats["layers"])))


def _layer_cell(index: int, layer: dict) -> str:
    ffn = f"{layer['neurons']}n" if layer["ffn"] else "ffn×"
    return (f"{index}:{layer['heads']}h[{layer['expected_heads']:.1f}]·{sum(layer['value_dims'])}d/"
            f"{ffn}[{layer['expected_neurons']:.0f}]")


def render_hiap(console: Console, model: str, report: HiAPReport) -> None:
    """What HiAP kept per block and what it gained: budget, accuracy (extracted, no fine-tuning), MACs, speed."""
    budget = ("no MAC target (fixed λ)" if report.target_macs is None else
              f"target {format_count(report.target_macs)} MACs, hardening threshold {report.threshold:.3f}")
    console.print(f"[bold]HiAP on {model}[/] (starting checkpoint: {model}): {budget}; kept {report.heads} heads, "
                  f"{report.neurons} FFN neurons; FFN blocks closed: {report.ffn_closed or 'none'}")
    table = Table("block", "heads", "value dims per head", "FFN neurons", title="extracted architecture")
    for i, layer in enumerate(report.layers):
        table.add_row(str(i), f"{layer['heads']}/{layer['heads_of']}",
                      ", ".join(map(str, layer["value_dims"])) or "-",
                      f"{layer['neurons']}/{layer['neurons_of']}" if layer["ffn"] else "closed")
    console.print(table)
    top1 = report.top1
    cell = (f"{percent(top1['extracted'])} extracted, no fine-tuning "
            f"({share(top1['extracted'], top1['dense'])} of dense)")
    render_gains(console, model, "HiAP", cell, report)
    console.print(f"per-block architecture plot: {report.plot}")
