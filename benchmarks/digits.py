"""Every method and chain on the digits ViT at one fine-tuning budget: accuracy, MACs, measured speedup, Pareto plot.

Each variant is a chain (:func:`vitprune.runs.chain.run_chain`): the method's own steps, then one
``finetune`` step of ``--epochs`` epochs (AdamW, soft distillation from the dense model). Every variant
gets the same recovery budget; what a method spends before it to decide what to cut (HetDPT's
predictor probes and learned importance, HiAP's gated training, VBP's and STAR's calibration passes)
is its own and is timed in ``seconds``. Budgets aim at two cost levels, about 3/4 and 1/2 of the
dense model's MACs; HetDPT's are layer counts (k of 24), VBP's a neuron share.

* ``HetDPT k``: the predictor's split (fitted once, by the first HetDPT variant, and reused), learned importance;
* ``VBP r``: remove the share r of FFN neurons of lowest activation variance, mean-shift compensation;
* ``STAR``: token pruning to a MAC target (ACS schedule with min-max anchors, fused [CLS] attention + LRP prior;
  the paper's first/last-block anchors fail on the depth-pruned chain, whose last block's ACS is below its first's);
* ``width``: torch-pruning (isomorphic, magnitude) to a MAC target, widths rounded to multiples of 4;
* ``HiAP``: gates trained for ``--epochs`` under the MAC target, extracted;
* chains: ``HetDPT+`` (HetDPT k=8, then width to the target) and ``HetDPT → STAR`` (k=8, then STAR to it).

Per variant: top-1 before pruning, after pruning (the last pruning step) and after fine-tuning; params;
MACs in both conventions; the consistency check of the result (MACs against FlopCounterMode, save/load,
recipe rebuild, ONNX); the speedup over the dense model in alternating pairs (batch ``--speed-batch``).
Starting checkpoint: vitprune's trained ``digits-vit`` (cached; trained on first use). Writes
``<out-dir>/digits.{json,md}``, the Pareto plot ``digits_pareto.png`` (top-1 after fine-tuning against the
measured speedup), HetDPT's MAP surface with its budget line ``digits_map.png``, HiAP's per-layer
architecture ``digits_hiap_architecture.png`` and STAR's per-layer token counts ``digits_star_tokens.png``.

    python benchmarks/digits.py                         # about 5 minutes on 2 CPU cores
    python benchmarks/digits.py --variants "VBP 30%" "VBP 60%" --epochs 1
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profile_deit import write_results

import vitprune
from vitprune.atomic import atomic_file
from vitprune.data import build_dataset
from vitprune.measure import CONVENTIONS, SpeedConfig, count_macs
from vitprune.methods.hetdpt.pipeline import PREDICTOR_FILE, PREDICTOR_PLOT
from vitprune.methods.hiap.pipeline import PLOT_FILE as HIAP_PLOT
from vitprune.plotting import figure, save_figure
from vitprune.runs import MethodData, RunContext
from vitprune.runs.chain import MODEL_DIR, STEPS_DIR, ChainReport, run_chain
from vitprune.runs.steps import parse_chain

CHECKPOINT = "digits-vit (trained by vitprune on scikit-learn's digits)"
#: HetDPT step settings: the digits preset (as ``vitprune demo``).
_HETDPT = {"method": "hetdpt", "preset": "digits"}
_STAR = {"method": "star", "acs_images": 256, "lrp_images": 256, "classes": 2, "anchor": "minmax"}
_WIDTH = {"method": "width", "round_to": 4}


def _variants(dense_macs: int, predictor: Callable[[], str], epochs: int) -> dict[str, tuple[str, Callable]]:
    """Label -> (family, steps builder). Builders run lazily: later HetDPT variants need the first one's predictor."""
    hiap = {"method": "hiap", "epochs": epochs, "lr": 5e-4, "batch_size": 64}
    return {
        "HetDPT k=12": ("HetDPT", lambda: [{**_HETDPT, "budget": 12}]),
        "HetDPT k=6": ("HetDPT", lambda: [{**_HETDPT, "budget": 6, "predictor": predictor()}]),
        "VBP 30%": ("VBP", lambda: [{"method": "vbp", "ratio": 0.3}]),
        "VBP 60%": ("VBP", lambda: [{"method": "vbp", "ratio": 0.6}]),
        "STAR 75% MACs": ("STAR", lambda: [{**_STAR, "target_macs": 0.75 * dense_macs}]),
        "STAR 50% MACs": ("STAR", lambda: [{**_STAR, "target_macs": 0.5 * dense_macs}]),
        "width 75% MACs": ("width", lambda: [{**_WIDTH, "target_macs": 0.75 * dense_macs}]),
        "width 50% MACs": ("width", lambda: [{**_WIDTH, "target_macs": 0.5 * dense_macs}]),
        "HiAP 75% MACs": ("HiAP", lambda: [{**hiap, "target_macs": 0.75 * dense_macs}]),
        "HiAP 50% MACs": ("HiAP", lambda: [{**hiap, "target_macs": 0.5 * dense_macs}]),
        "HetDPT+ k=8, 50% MACs": ("chain", lambda: [{**_HETDPT, "budget": 8, "predictor": predictor()},
                                                    {**_WIDTH, "target_macs": 0.5 * dense_macs}]),
        "HetDPT k=8 → STAR 50% MACs": ("chain", lambda: [{**_HETDPT, "budget": 8, "predictor": predictor()},
                                                         {**_STAR, "target_macs": 0.5 * dense_macs}]),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=None, help="labels to run (default: all)")
    parser.add_argument("--epochs", type=int, default=3, help="fine-tuning epochs after pruning (and HiAP's training)")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--speed-batch", type=int, default=64)
    parser.add_argument("--speed-pairs", type=int, default=10)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    return parser.parse_args(argv)


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Run every chosen variant in ``work``; the report. HetDPT's MAP plot and HiAP's architecture plot (of the
    last HiAP variant) are copied to the output folder as their runs finish."""
    dense = vitprune.create_model("digits-vit", pretrained=True)
    size = vitprune.get_adapter(dense).input_size
    train, val = (build_dataset("digits", split, input_size=size) for split in ("train", "val"))
    calibration = build_dataset("digits", "train", input_size=size, is_training=False)
    dense_figures = count_macs(dense).totals()
    dense_macs = dense_figures["macs_full"]
    finetune = {"method": "finetune", "epochs": args.epochs, "lr": args.lr, "batch_size": 64, "distill": "soft"}
    fitted: list[Path] = []

    def predictor() -> str:
        if not fitted:
            raise SystemExit("a HetDPT variant that reuses the predictor needs 'HetDPT k=12' (which fits it) first")
        return str(fitted[0])

    variants = _variants(dense_macs, predictor, args.epochs)
    chosen = args.variants or list(variants)
    unknown = [label for label in chosen if label not in variants]
    if unknown:
        raise SystemExit(f"unknown variant {unknown[0]!r} (choose from: {', '.join(variants)})")
    rows = []
    for label in sorted(chosen, key=list(variants).index):
        family, build_steps = variants[label]
        run_dir = work / f"{len(rows):02d}"
        start = time.perf_counter()
        steps = build_steps()
        report = run_chain(dense, MethodData(train, val, calibration), parse_chain([*steps, finetune], preset="digits"),
                           RunContext(run_dir, speed=SpeedConfig(batch_size=args.speed_batch, pairs=args.speed_pairs),
                                      progress=sys.stderr.isatty()))
        seconds = time.perf_counter() - start
        first = run_dir / STEPS_DIR / f"01-{steps[0]['method']}"
        if steps[0]["method"] == "hetdpt" and not fitted:
            fitted.append(first / PREDICTOR_FILE)
            _copy(first / PREDICTOR_PLOT, args.out_dir / "digits_map.png")
        if steps[0]["method"] == "hiap":
            _copy(first / HIAP_PLOT, args.out_dir / "digits_hiap_architecture.png")
        rows.append(_row(label, family, report, seconds, run_dir))
        print(f"{label}: top-1 {100 * rows[-1]['top1']['pruned']:.2f}% after pruning, "
              f"{100 * rows[-1]['top1']['finetuned']:.2f}% after fine-tuning, "
              f"{rows[-1]['macs_full'] / 1e6:.2f} M MACs, speedup {rows[-1]['speed']['speedup']:.3f} "
              f"({seconds:.0f} s)", file=sys.stderr, flush=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "starting_checkpoint": CHECKPOINT,
            "dense": {"top1": rows[0]["top1"]["dense"] if rows else None, **dense_figures},
            "finetune": finetune, "conventions": CONVENTIONS, "speed_batch": args.speed_batch,
            "speed_pairs": args.speed_pairs, "rows": rows}


def _copy(source: Path, target: Path) -> None:
    with atomic_file(target) as tmp:
        shutil.copyfile(source, tmp)


def _row(label: str, family: str, report: ChainReport, seconds: float, run_dir: Path) -> dict[str, Any]:
    steps = report.steps
    pruned, tuned = steps[-2], steps[-1]
    speed = report.speed
    return {"label": label, "family": family, "chain": report.chain,
            "top1": {"dense": report.top1["dense"], "pruned": pruned["top1"], "finetuned": tuned["top1"]},
            **report.pruned, "consistent": report.consistency["ok"],
            "speed": {k: speed[k] for k in ("speedup", "speedup_q1", "speedup_q3", "pairs")} | {
                "context": speed["a"]["context"]},
            "step_summaries": [{"method": s["method"], "summary": s["summary"]} for s in steps[1:]],
            "tokens": [b["tokens"] for b in count_macs(vitprune.load(run_dir / MODEL_DIR)).to_dict()["blocks"]],
            "seconds": seconds}


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def to_markdown(report: dict[str, Any]) -> str:
    """The results page: context, then one row per variant."""
    dense, tune = report["dense"], report["finetune"]
    context = report["rows"][0]["speed"]["context"] if report["rows"] else {}
    lines = [
        "# Every method on the digits ViT at one fine-tuning budget",
        "",
        f"Starting checkpoint: {report['starting_checkpoint']}; dense top-1 {_pct(dense['top1'])}%, "
        f"{dense['params'] / 1e3:.1f} k params, {dense['macs_full'] / 1e6:.2f} M MACs full "
        f"({dense['macs_linear'] / 1e6:.2f} M linear). Every variant is pruned, then fine-tuned for "
        f"{tune['epochs']} epochs (AdamW, lr {tune['lr']}, batch {tune['batch_size']}, {tune['distill']} distillation "
        f"from the dense model); top-1 on the validation split. MACs per image: *full* = "
        f"{report['conventions']['full']}; *linear* = {report['conventions']['linear']}. Speedup = dense time / "
        f"pruned time, median [IQR] over {report['speed_pairs']} alternating pairs at batch {report['speed_batch']}, "
        f"{context.get('dtype', '?')} on {context.get('device', '?')} ({context.get('device_name', '?')}, "
        f"{context.get('threads', '?')} threads, torch {context.get('torch', '?')}). *consistent*: the result passed "
        "`check_consistency` (MACs against FlopCounterMode, save/load, recipe rebuild, ONNX). Generated "
        f"{report['date']} by `benchmarks/digits.py`.",
        "",
        "| variant | top-1 after pruning | top-1 after fine-tuning | params (k) | M MACs full | M MACs linear | "
        "MAC ratio (full) | speedup | consistent | seconds |",
        "|---|---:|---:|---:|---:|---:|---:|---:|:-:|---:|",
    ]
    for r in report["rows"]:
        s, top1 = r["speed"], r["top1"]
        lines.append(
            f"| {r['label']} | {_pct(top1['pruned'])} | {_pct(top1['finetuned'])} | {r['params'] / 1e3:.1f} | "
            f"{r['macs_full'] / 1e6:.2f} | {r['macs_linear'] / 1e6:.2f} | {dense['macs_full'] / r['macs_full']:.3f} | "
            f"{s['speedup']:.3f} [{s['speedup_q1']:.3f}-{s['speedup_q3']:.3f}] | "
            f"{'yes' if r['consistent'] else 'NO'} | {r['seconds']:.0f} |")
    lines += ["", "Plots: [Pareto](digits_pareto.png), [MAP surface](digits_map.png), "
              "[HiAP architecture](digits_hiap_architecture.png), [STAR tokens](digits_star_tokens.png).", ""]
    return "\n".join(lines)


def plot_pareto(report: dict[str, Any], path: Path) -> None:
    """Top-1 after fine-tuning against the measured speedup, one series per family (the HetDPT paper's Fig. 1 form)."""
    fig = figure(figsize=(7, 4.5))
    ax = fig.subplots()
    families = dict.fromkeys(r["family"] for r in report["rows"])
    for family, marker in zip(families, "osD^vP*X"):
        rows = sorted((r for r in report["rows"] if r["family"] == family), key=lambda r: r["speed"]["speedup"])
        ax.plot([r["speed"]["speedup"] for r in rows], [100 * r["top1"]["finetuned"] for r in rows],
                marker=marker, linestyle="-" if family != "chain" else "none", label=family)
        for r in rows:
            ax.annotate(r["label"].removeprefix(family).strip() or r["label"],
                        (r["speed"]["speedup"], 100 * r["top1"]["finetuned"]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
    ax.plot([1.0], [100 * report["dense"]["top1"]], "k*", markersize=10, label="dense")
    context = report["rows"][0]["speed"]["context"]
    ax.set_xlabel(f"measured speedup over dense ({context['device']}, {context['dtype']}, "
                  f"batch {report['speed_batch']})")
    ax.set_ylabel(f"val top-1 after {report['finetune']['epochs']} fine-tuning epochs (%)")
    ax.set_title(f"{report['starting_checkpoint'].split(' (')[0]}: accuracy against speed")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def plot_star_tokens(report: dict[str, Any], path: Path) -> None:
    """Tokens entering each block, for every variant that prunes tokens, against the dense count."""
    rows = [r for r in report["rows"] if len(set(r["tokens"])) > 1]
    fig = figure(figsize=(7, 4))
    ax = fig.subplots()
    if rows:
        blocks = range(len(rows[0]["tokens"]))
        ax.plot(blocks, [rows[0]["tokens"][0]] * len(blocks), "k:", label="dense")
        for r in rows:
            ax.plot(blocks, r["tokens"], "o-", label=r["label"])
        ax.set_xticks(list(blocks))
    ax.set_xlabel("block")
    ax.set_ylabel("tokens entering the block ([CLS] included)")
    ax.set_title("STAR: tokens per block")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    """Run, then write the JSON, Markdown and plots."""
    args = parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        report = run(args, Path(tmp))
    write_results(args.out_dir, "digits", report, to_markdown(report))
    plot_pareto(report, args.out_dir / "digits_pareto.png")
    plot_star_tokens(report, args.out_dir / "digits_star_tokens.png")


if __name__ == "__main__":
    main()
