"""HetDPT against single-type and TE-static depth pruning on the digits ViT, at equal fine-tuning budgets.

For each budget k (layers removed of the 24 attention + GELU layers), every method chooses k
layers, then the same Stage 2 recovers it (prune with fc1/fc2 apart -> fine-tune with soft
self-distillation from the dense model -> merge; the ``digits`` preset):

* ``hetdpt``: the predictor's split (one predictor, fitted once, serves every k) + learnable importance;
* ``attention-only`` / ``activation-only``: greedy transfer entropy within one type (k <= 12);
* ``te-static``: the k lowest of one joint TE ranking;
* ``cross-type``: learnable importance compared across types, no predictor.

Then accuracy, params, MACs (both conventions) and the measured speedup over the dense model
(alternating pairs) of each result, and the cost: time per HetDPT stage and the step time of
gated (Step 2) training against plain fine-tuning. Starting checkpoint: vitprune's trained
``digits-vit`` (cached; trained on first use). Writes ``<out-dir>/hetdpt_digits.{json,md,png}``.

    python benchmarks/hetdpt_digits.py                       # budgets 4 6 8 10 12, about 25 minutes on 2 cores
    python benchmarks/hetdpt_digits.py --budgets 8 --methods hetdpt te-static
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from profile_deit import write_results

import vitprune
from vitprune.atomic import atomic_file
from vitprune.data import balanced_subset, build_dataset, build_loader
from vitprune.measure import compare_speed, count_macs
from vitprune.methods.hetdpt import HetDPTRun
from vitprune.methods.hetdpt.baselines import greedy_te, te_static
from vitprune.methods.hetdpt.importance import select_layers, select_layers_across_types
from vitprune.methods.hetdpt.pipeline import PREDICTOR_FILE, preset, prune_and_recover, run_hetdpt
from vitprune.methods.hetdpt.predictor import load_predictor, search_split
from vitprune.runs import MethodData, RunContext
from vitprune.surgery import add_depth_gates
from vitprune.training import Trainer

METHODS = ("hetdpt", "attention-only", "activation-only", "te-static", "cross-type")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[4, 6, 8, 10, 12])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--speed-batch", type=int, default=64)
    parser.add_argument("--speed-pairs", type=int, default=10)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    return parser.parse_args(argv)


def _choose(method: str, budget: int, model, train, te_batches, config, fit) -> tuple[list[int], list[int]]:
    if method == "attention-only":
        return greedy_te(model, "attention", budget, te_batches, identity=config.identity)
    if method == "activation-only":
        return greedy_te(model, "activation", budget, te_batches, identity=config.identity)
    if method == "te-static":
        return te_static(model, budget, te_batches, identity=config.identity)
    if method == "cross-type":
        chosen = select_layers_across_types(model, train, config.search, budget=budget, identity=config.identity,
                                            prune_fraction=config.prune_fraction)
    else:
        split = search_split(fit, budget, 12, min_per_type=config.min_per_type)
        chosen = select_layers(model, train, config.search, attention=split.attention, activation=split.activation,
                               identity=config.identity, prune_fraction=config.prune_fraction)
    return chosen.attention, chosen.activation


def _step_times(model, train, config, rounds: int = 3) -> dict[str, Any]:
    """Epoch time of gated (Step 2) vs plain training on the same data and settings, alternating, median ratio."""
    seconds: dict[str, list[float]] = {"plain": [], "gated": []}
    for i in range(rounds):
        for name in (("plain", "gated") if i % 2 == 0 else ("gated", "plain")):
            work = copy.deepcopy(model)
            if name == "gated":
                add_depth_gates(work, identity=config.identity)
            seconds[name].append(Trainer(work, train, replace(config.search, epochs=1)).fit()[0]["seconds"])
    ratios = [g / p for g, p in zip(seconds["gated"], seconds["plain"])]
    return {"plain_s": statistics.median(seconds["plain"]), "gated_s": statistics.median(seconds["gated"]),
            "ratio": statistics.median(ratios), "ratios": ratios, "batch_size": config.search.batch_size,
            "images": len(train)}


def main(argv: list[str] | None = None) -> None:
    """Run every method at every budget, measure, and write the results."""
    args = parse_args(argv)
    config = preset("digits")
    model = vitprune.create_model("digits-vit", pretrained=True)
    size = vitprune.get_adapter(model).input_size
    train, val = (build_dataset("digits", split, input_size=size) for split in ("train", "val"))
    plain_train = build_dataset("digits", "train", input_size=size, is_training=False)
    te_batches = list(build_loader(balanced_subset(plain_train, config.te_images, seed=0), 64, shuffle=False, seed=0))
    dense = {"top1": None, **count_macs(model).totals()}
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        # One HetDPT run at the largest budget fits the predictor (its sweeps cover that budget) and times the stages.
        reference = run_hetdpt(model, MethodData(train, val, plain_train), HetDPTRun(max(args.budgets), config=config),
                               RunContext(Path(tmp) / "hetdpt", progress=sys.stderr.isatty(), log=print))
        fit = load_predictor(Path(tmp) / "hetdpt" / PREDICTOR_FILE)
        dense["top1"] = reference.top1["dense"]
        for budget in args.budgets:
            for method in args.methods:
                if method in ("attention-only", "activation-only") and budget > 12:
                    continue
                start = time.perf_counter()
                attention, activation = _choose(method, budget, model, train, te_batches, config, fit)
                chose = time.perf_counter() - start
                pruned, top1 = prune_and_recover(model, attention, activation, train, val, config)
                comparison = compare_speed(pruned, model, batch_size=args.speed_batch, pairs=args.speed_pairs,
                                           warmup=2)
                row = {"budget": budget, "method": method, "attention": attention, "activation": activation,
                       "top1": top1, **count_macs(pruned).totals(),
                       "speedup": comparison.speedup, "speedup_q1": comparison.spread.q1,
                       "speedup_q3": comparison.spread.q3, "choose_seconds": chose,
                       "context": comparison.a.context.to_dict()}
                print(f"k={budget} {method}: attention {attention} activation {activation} -> "
                      f"{100 * top1['finetuned']:.2f}% (after removal {100 * top1['pruned']:.2f}%), "
                      f"speedup {comparison.speedup:.3f}", flush=True)
                results.append(row)
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "starting_checkpoint": "digits-vit (trained by vitprune)",
              "config": config.to_dict(), "dense": dense, "predictor": reference.predictor,
              "stage_seconds": {"budget": max(args.budgets), **reference.seconds},
              "step_time": _step_times(model, train, config), "results": results}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_results(args.out_dir, "hetdpt_digits", report, to_markdown(report))
    plot(report, args.out_dir / "hetdpt_digits.png")
    print(f"wrote {args.out_dir}/hetdpt_digits.png")


def to_markdown(report: dict[str, Any]) -> str:
    """The comparison table, the cost, and their context."""
    ctx = report["results"][0]["context"]
    dense = report["dense"]
    step = report["step_time"]
    fit = report["predictor"]["fit"]
    lines = [
        "# HetDPT vs single-type and TE-static depth pruning on the digits ViT",
        "",
        f"Starting checkpoint: {report['starting_checkpoint']}, {100 * dense['top1']:.2f}% val top-1 (360 images), "
        f"{dense['params']:,} params, {dense['macs_full'] / 1e6:.2f} M MACs full / {dense['macs_linear'] / 1e6:.2f} M "
        "linear per image.",
        "Every choice is recovered the same way: `digits` preset Stage 2 (fc1/fc2 apart, "
        f"{report['config']['finetune']['epochs']} epochs, soft self-distillation from the dense model, then merged).",
        f"Speedup: dense time / pruned time, median of alternating pairs [IQR], {ctx['device_name']}, {ctx['dtype']}, "
        f"batch {ctx['batch_size']}, {ctx['threads']} threads, torch {ctx['torch']}. {report['date']}.",
        f"Predictor (fitted once, degree {fit['degree']}, L2OCV MAE {fit['mae']:.3f} / RMSE {fit['rmse']:.3f} over "
        f"{len(fit['points'])} points).",
        "",
        "| k | method | attention removed | GELU removed | top-1 after removal | top-1 fine-tuned | params | "
        "MACs full (M) | speedup |",
        "|---:|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        lines.append(f"| {r['budget']} | {r['method']} | {r['attention']} | {r['activation']} | "
                     f"{100 * r['top1']['pruned']:.2f}% | {100 * r['top1']['finetuned']:.2f}% | {r['params']:,} | "
                     f"{r['macs_full'] / 1e6:.2f} | {r['speedup']:.3f} [{r['speedup_q1']:.3f}-{r['speedup_q3']:.3f}] |")
    seconds = ", ".join(f"{k}: {v:.0f} s" if isinstance(v, float) else f"{k} {v}"
                        for k, v in report["stage_seconds"].items())
    lines += [
        "",
        f"Cost of one HetDPT run (2 CPU cores): {seconds}.",
        "",
        f"Training time, gated Step-2 training vs plain fine-tuning (one epoch of {step['images']} images at batch "
        f"{step['batch_size']}, alternating, median): {step['gated_s']:.2f} s vs {step['plain_s']:.2f} s, "
        f"ratio {step['ratio']:.3f}.",
    ]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    """Fine-tuned top-1 against measured speedup, one line per method."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.subplots()
    for method in METHODS:
        rows = sorted((r for r in report["results"] if r["method"] == method), key=lambda r: r["budget"])
        if rows:
            ax.plot([r["speedup"] for r in rows], [100 * r["top1"]["finetuned"] for r in rows], "o-", label=method)
            for r in rows:
                ax.annotate(str(r["budget"]), (r["speedup"], 100 * r["top1"]["finetuned"]), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
    ax.axhline(100 * report["dense"]["top1"], color="gray", linestyle=":", label="dense")
    ax.set_xlabel("measured speedup over dense (labels: k layers removed)")
    ax.set_ylabel("val top-1 after fine-tuning (%)")
    ax.set_title("digits-vit: depth pruning at equal fine-tuning budget")
    ax.legend()
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)


if __name__ == "__main__":
    main()
