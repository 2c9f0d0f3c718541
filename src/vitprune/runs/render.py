"""The printed views every method's report shares (rich tables on a console the caller gives): what a run gained
against its starting model, what an edit saved as one model changed, a chain's steps. Each method's own view lives in
its folder (``methods/NAME/render.py``) and builds on these. Every table says what it measured and how.

Imports no torch: the command line imports it at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table

from vitprune.measure.config import busy_note, format_count

if TYPE_CHECKING:
    from rich.console import Console


def percent(value: float | None) -> str:
    """An accuracy (a fraction) as a percentage; ``-`` where it is missing."""
    return "-" if value is None else f"{100 * value:.2f}%"


def ratio(value: float | None, of: float | None) -> str:
    """``value / of`` to three decimals; ``-`` where either is missing or ``of`` is zero."""
    return "-" if value is None or not of else f"{value / of:.3f}"


def share(value: float | None, of: float | None) -> str:
    """``value`` as a percentage of ``of``; ``-`` where either is missing or ``of`` is zero (a dense top-1 of 0)."""
    return "-" if value is None or not of else f"{100 * value / of:.1f}%"


def _fraction(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def retention_cell(top1: dict, retention: dict) -> str:
    """The pruned top-1 cell of a method that reports retention: right after pruning and, fine-tuned, after it, each
    with its share of the dense accuracy."""
    cell = f"right after pruning {percent(top1['pruned'])} ({_fraction(retention['pruned'])} of dense)"
    if "finetuned" in top1:
        cell = f"{percent(top1['finetuned'])} after fine-tuning ({_fraction(retention['finetuned'])} of dense); " + cell
    return cell


def context_line(result: dict) -> str:
    """Where and how a timing (a :class:`~vitprune.measure.SpeedResult`'s JSON form) was taken."""
    c = result["context"]
    return (f"{c['device_name']} ({c['device']}), {c['dtype']}, batch {c['batch_size']}, {c['threads']} threads, "
            f"torch {c['torch']}, {result['repeats']} timed runs after {result['warmup']} warm-up")


def warn_if_busy(console: Console, result: dict) -> None:
    """Under a timing's figures, the warning that the machine was busy while it ran (:func:`busy_note`)."""
    note = busy_note(result)
    if note:
        console.print(f"[bold yellow]{note}[/]")


def render_comparison(console: Console, model: str, other: str, comparison: dict | None) -> None:
    """Both models' timings and the pair-by-pair speedup of MODEL over OTHER, from a
    :class:`~vitprune.measure.Comparison`'s JSON form; one line when the speed was not measured (``None``)."""
    if comparison is None:
        console.print("speed: not measured (--no-speed)")
        return
    table = Table("model", "median ms/batch", "IQR ms", "images/s", title=context_line(comparison["a"]))
    for name, result in ((model, comparison["a"]), (other, comparison["b"])):
        table.add_row(name, f"{result['median_ms']:.2f}", f"{result['q1_ms']:.2f}–{result['q3_ms']:.2f}",
                      f"{result['throughput']:.1f}")
    console.print(table)
    console.print(f"[bold]speedup[/] of {model} over {other} ({other}'s time ÷ {model}'s, median of "
                  f"{comparison['pairs']} alternating pairs): [bold]{comparison['speedup']:.3f}×[/] "
                  f"(IQR {comparison['speedup_q1']:.3f}–{comparison['speedup_q3']:.3f}, min "
                  f"{comparison['speedup_min']:.3f}, max {comparison['speedup_max']:.3f})")
    warn_if_busy(console, comparison["a"])


def render_gains(console: Console, model: str, method: str, top1_cell: str, report: Any) -> None:
    """What a run gained against its starting model: top-1 (``top1_cell`` for the pruned model), params, MACs in
    both conventions, the measured speed, the time per stage and where the model went."""
    top1, dense, pruned, speed = report.top1, report.dense, report.pruned, report.speed
    table = Table("", "dense", "pruned", "pruned / dense",
                  title=f"{model} vs {method}-pruned (MACs per image: full = with attention matmuls, linear = "
                        "linear/conv layers only)")
    table.add_row("top-1", percent(top1['dense']), top1_cell, "")
    for label, key in (("params", "params"), ("MACs (full)", "macs_full"), ("MACs (linear)", "macs_linear")):
        table.add_row(label, format_count(dense[key]), format_count(pruned[key]), ratio(pruned[key], dense[key]))
    if speed is None:
        table.add_row("ms/batch", "-", "-", "speed not measured (--no-speed)")
    else:
        ctx, busy = speed["a"]["context"], busy_note(speed["a"])
        table.add_row(f"ms/batch ({ctx['device_name']}, {ctx['dtype']}, batch {ctx['batch_size']})",
                      f"{speed['b']['median_ms']:.2f}", f"{speed['a']['median_ms']:.2f}",
                      f"speedup {speed['speedup']:.3f}× (IQR {speed['speedup_q1']:.3f}–{speed['speedup_q3']:.3f}, "
                      f"{speed['pairs']} alternating pairs)" + (f"; {busy}" if busy else ""))
    console.print(table)
    seconds = ", ".join(f"{name} {s:.0f} s" for name, s in report.seconds.items())
    console.print(f"time per stage: {seconds}")
    console.print(f"saved the pruned model to {report.model_dir}")


def render_report(console: Console, model: str, report: Any, method: str) -> None:
    """A ``method``'s report by its common fields (``top1`` with ``dense``, ``dense``, ``pruned``, ``speed``,
    ``seconds``, ``model_dir``): the view of a method that brings no renderer of its own."""
    cell = ", ".join(f"{percent(value)} {name.replace('_', ' ')}" for name, value in report.top1.items()
                     if name != "dense")
    render_gains(console, model, method, cell, report)


def render_edit(console: Console, report: Any, *, title: str) -> None:
    """What an edit saved as one model directory did (depth or width pruning, a merge): a before/after table under
    ``title``, with the speed."""
    before, after = report.before, report.after
    table = Table("", "before", "after", "after / before", title=title)
    rows = [("params", "params"), ("MACs, full (with attention matmuls)", "macs_full"),
            ("MACs, linear-only (no attention matmuls)", "macs_linear")]
    for label, key in rows:
        table.add_row(label, format_count(before[key]), format_count(after[key]), ratio(after[key], before[key]))
    console.print(table)
    render_comparison(console, "pruned", report.model, report.speed)
    if report.speed is not None:
        console.print(f"MAC ratio (full convention): {ratio(before['macs_full'], after['macs_full'])}×")
    console.print(f"saved to {report.out} (starting checkpoint: {report.model})")


def render_chain(console: Console, model: str, report: Any) -> None:
    """Each step's footprint and accuracy, the final model's consistency check, and what the chain gained (a
    :class:`~vitprune.runs.chain.ChainReport`)."""
    table = Table("step", "method", "params", "MACs (full)", "MACs (linear)", "top-1",
                  title=f"chain from {model} (starting checkpoint: {model}); top-1 on the validation split after each "
                        "step")
    for record in report.steps:
        table.add_row(str(record["step"]), record["method"], format_count(record["params"]),
                      format_count(record["macs_full"]), format_count(record["macs_linear"]),
                      percent(record['top1']))
    console.print(table)
    check = report.consistency
    onnx = (f"ONNX max diff {check['onnx_max_diff']:.1e}" if check["onnx_max_diff"] is not None
            else f"ONNX skipped: {check['onnx_skipped']}")
    verdict = "[green]consistent[/]" if check["ok"] else "[bold red]INCONSISTENT[/]"
    console.print(f"{verdict}: MACs {check['macs_counted']:,} + value padding {check['macs_padding']:,} vs "
                  f"{check['flop_counter_reference']} {check['macs_flop_counter']:,}; save/load max diff "
                  f"{check['round_trip_max_diff']:.1e}; recipe rebuilds the architecture: "
                  f"{'yes' if check['architecture_rebuilt'] else 'no'}; {onnx}")
    methods = " → ".join(record["method"] for record in report.steps[1:])
    render_gains(console, model, f"chain ({methods})", percent(report.top1['final']), report)


__all__ = ["context_line", "percent", "ratio", "render_chain", "render_comparison", "render_edit", "render_gains",
           "render_report", "retention_cell", "share", "warn_if_busy"]
