"""Rich tables for the commands' human-readable output. Every table says what it measured and how."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.table import Table

from vitprune.cli.app import console, err_console, print_json
from vitprune.measure import busy_note, format_count

if TYPE_CHECKING:  # these modules import torch: the commands import them when they run
    from vitprune.measure import MacReport, SpeedResult
    from vitprune.methods.chain import ChainReport
    from vitprune.methods.hetdpt.pipeline import HetDPTReport
    from vitprune.methods.hiap.pipeline import HiAPReport
    from vitprune.methods.report import Report
    from vitprune.methods.star.pipeline import STARReport
    from vitprune.methods.vbp.pipeline import VBPReport
    from vitprune.training.config import TrainConfig

    MethodReport = ChainReport | HetDPTReport | HiAPReport | STARReport | VBPReport


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


def _context_line(result: dict) -> str:
    """Where and how a timing (a :class:`~vitprune.measure.SpeedResult`'s JSON form) was taken."""
    c = result["context"]
    return (f"{c['device_name']} ({c['device']}), {c['dtype']}, batch {c['batch_size']}, {c['threads']} threads, "
            f"torch {c['torch']}, {result['repeats']} timed runs after {result['warmup']} warm-up")


def render_speed(model: str, result: SpeedResult) -> None:
    """Median latency per batch with its spread, and the throughput it implies."""
    s = result.spread
    table = Table("model", "median ms/batch", "IQR ms", "min–max ms", "images/s", title=_context_line(result.to_dict()))
    table.add_row(model, f"{s.median:.2f}", f"{s.q1:.2f}–{s.q3:.2f}", f"{s.min:.2f}–{s.max:.2f}",
                  f"{result.throughput:.1f}")
    console.print(table)
    _warn_if_busy(result.to_dict())


def render_comparison(model: str, other: str, comparison: dict | None) -> None:
    """Both models' timings and the pair-by-pair speedup of MODEL over OTHER, from a
    :class:`~vitprune.measure.Comparison`'s JSON form; one line when the speed was not measured (``None``)."""
    if comparison is None:
        console.print("speed: not measured (--no-speed)")
        return
    table = Table("model", "median ms/batch", "IQR ms", "images/s", title=_context_line(comparison["a"]))
    for name, result in ((model, comparison["a"]), (other, comparison["b"])):
        table.add_row(name, f"{result['median_ms']:.2f}", f"{result['q1_ms']:.2f}–{result['q3_ms']:.2f}",
                      f"{result['throughput']:.1f}")
    console.print(table)
    console.print(f"[bold]speedup[/] of {model} over {other} ({other}'s time ÷ {model}'s, median of "
                  f"{comparison['pairs']} alternating pairs): [bold]{comparison['speedup']:.3f}×[/] "
                  f"(IQR {comparison['speedup_q1']:.3f}–{comparison['speedup_q3']:.3f}, min "
                  f"{comparison['speedup_min']:.3f}, max {comparison['speedup_max']:.3f})")
    _warn_if_busy(comparison["a"])


def _warn_if_busy(result: dict) -> None:
    """Under a timing's figures, the warning that the machine was busy while it ran (:func:`busy_note`)."""
    note = busy_note(result)
    if note:
        console.print(f"[bold yellow]{note}[/]")


def render_eval(model: str, data: str, split: str, metrics: dict) -> None:
    """Accuracy and loss on one split."""
    table = Table("model", "data", "images", "top-1", "top-5", "loss")
    top5 = metrics.get("top5")
    table.add_row(model, f"{data}/{split}", str(metrics["count"]), percent(metrics['top1']),
                  percent(top5), "-" if metrics.get("loss") is None else f"{metrics['loss']:.4f}")
    console.print(table)


def render_hetdpt(model: str, report: HetDPTReport) -> None:
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
    _render_gains(model, "HetDPT", f"{percent(top1['finetuned'])} (right after removal {percent(top1['pruned'])})",
                  report)


def render_vbp(model: str, report: VBPReport) -> None:
    """What VBP removed and what it gained: neurons per block, accuracy (retention, fine-tuned), params, MACs, speed."""
    dense_width = max(report.widths_dense.values())
    total = sum(report.widths_dense.values())
    console.print(f"[bold]VBP on {model}[/] (starting checkpoint: {model}): removed {report.removed} of {total} "
                  f"MLP hidden neurons ({report.ratio:.0%}, ranked globally by {report.criterion}), mean-shift "
                  f"compensation {'on' if report.compensate else 'off'}")
    widths = ", ".join(f"{b}: {w}" for b, w in report.widths.items())
    console.print(f"MLP hidden width per block (was {dense_width}): {widths}")
    _render_gains(model, "VBP", _retention_cell(report.top1, report.retention), report)


def render_star(model: str, report: STARReport) -> None:
    """The keep-rate schedule and what STAR gained: accuracy (right after, fine-tuned), params, MACs, speed."""
    kind = "a-STAR (per-image counts)" if report.adaptive else "STAR"
    rho = "hand-set rates" if report.rho is None else f"rho {report.rho:.4f}"
    console.print(f"[bold]{kind} on {model}[/] (starting checkpoint: {model}): {rho}, alpha {report.alpha}")
    rates = ", ".join(f"{i}: {r:.3f}" for i, r in enumerate(report.keep_rates) if r < 1)
    console.print(f"keep rate per pruning block: {rates or 'none (rho 1 keeps every token)'}")
    if "macs_averaged_over_images" in report.pruned:
        console.print(f"a-STAR's MACs depend on the image: mean over {report.pruned['macs_averaged_over_images']} "
                      "validation images")
    _render_gains(model, kind, _retention_cell(report.top1, report.retention), report)


def render_hiap_epoch(stats: dict) -> None:
    """The live view after each HiAP epoch: MACs (expected, hardened) against the budget, and per block the
    heads, value dims and neurons the hardened gates keep (expected counts in brackets)."""
    # With a target the extraction hardens at the threshold that lands on it, not the paper's 0: show both.
    target_macs = stats.get("target_macs")
    target = "" if target_macs is None else (
        f", extracted now {format_count(stats['macs_extracted']) if stats.get('macs_extracted') else 'over'} / target "
        f"{format_count(target_macs)}")
    err_console.print(
        f"epoch {stats['epoch']}: MACs expected {format_count(stats['macs_expected_exact'])} (exact), hardened at 0 "
        f"{format_count(stats['macs_hardened'])}{target}; τ {stats['tau']:.2f}, λ scale {stats['lambda_scale']:.2f}, "
        f"undecided gates {100 * stats['undecided']:.0f}%, hardened val top-1 "
        f"{percent(stats.get('val_top1'))}")
    err_console.print("  " + "  ".join(_layer_cell(i, layer) for i, layer in enumerate(stats["layers"])))


def _layer_cell(index: int, layer: dict) -> str:
    ffn = f"{layer['neurons']}n" if layer["ffn"] else "ffn×"
    return (f"{index}:{layer['heads']}h[{layer['expected_heads']:.1f}]·{sum(layer['value_dims'])}d/"
            f"{ffn}[{layer['expected_neurons']:.0f}]")


def render_hiap(model: str, report: HiAPReport) -> None:
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
    _render_gains(model, "HiAP", cell, report)
    console.print(f"per-block architecture plot: {report.plot}")


def percent(value: float | None) -> str:
    """An accuracy (a fraction) as a percentage; ``-`` where it is missing."""
    return "-" if value is None else f"{100 * value:.2f}%"


def ratio(value: float | None, of: float | None) -> str:
    """``value / of`` to three decimals; ``-`` where either is missing or ``of`` is zero."""
    return "-" if value is None or not of else f"{value / of:.3f}"


def share(value: float | None, of: float | None) -> str:
    """``value`` as a percentage of ``of``; ``-`` where either is missing or ``of`` is zero (a dense top-1 of 0)."""
    return "-" if value is None or not of else f"{100 * value / of:.1f}%"


def _retention_cell(top1: dict, retention: dict) -> str:
    cell = f"right after pruning {percent(top1['pruned'])} ({_fraction(retention['pruned'])} of dense)"
    if "finetuned" in top1:
        cell = f"{percent(top1['finetuned'])} after fine-tuning ({_fraction(retention['finetuned'])} of dense); " + cell
    return cell


def _fraction(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _render_gains(model: str, method: str, top1_cell: str, report: MethodReport) -> None:
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


def render_chain(model: str, report: ChainReport) -> None:
    """Each step's footprint and accuracy, the final model's consistency check, and what the chain gained."""
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
    _render_gains(model, f"chain ({methods})", percent(report.top1['final']), report)


def render_lr(train: TrainConfig, recipe: TrainConfig) -> None:
    """Under a report, the peak lr the run trained at and how it follows from the ``recipe``'s (the JSON report's
    ``config`` holds it)."""
    how = ("the recipe's" if train.lr == recipe.lr and train.batch_size == recipe.batch_size
           else "scaled with the batch" if train.lr == recipe.at_batch(train.batch_size).lr else "given")
    console.print(f"trained at lr {train.lr:.3g} for a global batch of {train.batch_size} ({how}; the recipe: "
                  f"{recipe.lr:.3g} at {recipe.batch_size})")


#: The printed view of a method's report, by the method's name; a method without one is shown by
#: :func:`render_report`.
RENDERERS: dict[str, Callable[[str, Any], None]] = {"hetdpt": render_hetdpt, "vbp": render_vbp, "star": render_star,
                                                    "hiap": render_hiap}
#: The live view after each training epoch, by the method's name.
EPOCH_VIEWS: dict[str, Callable[[dict], None]] = {"hiap": render_hiap_epoch}


def render_report(model: str, report: Any, method: str) -> None:
    """A ``method``'s report by its common fields (``top1`` with ``dense``, ``dense``, ``pruned``, ``speed``,
    ``seconds``, ``model_dir``): the view of a method that brings no renderer of its own."""
    cell = ", ".join(f"{percent(value)} {name.replace('_', ' ')}" for name, value in report.top1.items()
                     if name != "dense")
    _render_gains(model, method, cell, report)


def show_report(model: str, report: Report, render: Callable[[str, Any], None], json_out: bool) -> None:
    """Print a pipeline's report, naming MODEL: as JSON (the report's keys, then ``model``), or through ``render``."""
    if json_out:
        print_json({**report.to_dict(), "model": model})
    else:
        render(model, report)


def show_edit(report: Any, json_out: bool, *, title: str) -> None:
    """Print what an edit saved as one model directory did (depth or width pruning, a merge): as JSON, or as a
    before/after table under ``title`` with the speed."""
    if json_out:
        print_json(report.to_dict())
        return
    before, after = report.before, report.after
    table = Table("", "before", "after", "after / before", title=title)
    rows = [("params", "params"), ("MACs, full (with attention matmuls)", "macs_full"),
            ("MACs, linear-only (no attention matmuls)", "macs_linear")]
    for label, key in rows:
        table.add_row(label, format_count(before[key]), format_count(after[key]), ratio(after[key], before[key]))
    console.print(table)
    render_comparison("pruned", report.model, report.speed)
    if report.speed is not None:
        console.print(f"MAC ratio (full convention): {ratio(before['macs_full'], after['macs_full'])}×")
    console.print(f"saved to {report.out} (starting checkpoint: {report.model})")
