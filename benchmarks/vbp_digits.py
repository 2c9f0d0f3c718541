"""VBP against its baselines on the digits ViT: accuracy right after one-shot pruning and after a short fine-tune.

For each pruning ratio (default 30, 50 and 70% of all MLP hidden neurons, ranked globally) and
each criterion the same number of neurons goes, so every row has the same architecture:

* ``vbp``: post-activation variance + mean-shift compensation (the paper's method);
* ``magnitude``, ``snip``: the paper's Table 3 baselines, without compensation (the note's reading);
* ``random+ms``: random neurons + mean-shift compensation (Table 6's row without the variance criterion);
* ``variance``: the variance criterion without compensation (Table 6);
* ``pre-variance``: pre-activation variance + compensation (Table 7).

Statistics (and SNIP's gradients) come from one pass over the whole training split with the
evaluation transform, as the paper passes once over ImageNet's training set. Each pruned model
is then fine-tuned with the same short recipe (default 2 epochs, AdamW lr 5e-4, soft distillation
from the unpruned model) over ``--seeds`` fine-tuning seeds; random selection also uses each seed.
Starting checkpoint: vitprune's trained ``digits-vit`` (cached; trained on first use). Writes
``<out-dir>/vbp_digits.{json,md,png}``.

    python benchmarks/vbp_digits.py                          # about 10 minutes on 2 CPU cores
    python benchmarks/vbp_digits.py --ratios 0.5 --epochs 1 --seeds 0
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from profile_deit import write_results

import vitprune
from vitprune.atomic import atomic_file
from vitprune.data import build_dataset, build_loader
from vitprune.measure import count_macs
from vitprune.methods.vbp import mlp_statistics, neuron_scores, prune_by_selection, select_neurons
from vitprune.training import TrainConfig, evaluate, finetune_pruned

#: Method -> (criterion, mean-shift compensation).
METHODS = {
    "vbp": ("variance", True),
    "magnitude": ("magnitude", False),
    "snip": ("snip", False),
    "random+ms": ("random", True),
    "variance": ("variance", False),
    "pre-variance": ("pre-variance", True),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.3, 0.5, 0.7])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--epochs", type=int, default=2, help="fine-tuning epochs per pruned model")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="fine-tuning (and random) seeds")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    return parser.parse_args(argv)


def _scores(model, loader, methods: list[str], seeds: list[int]) -> tuple[dict, dict]:
    """Post-activation statistics once, and every criterion's scores (random: one set per seed)."""
    stats = mlp_statistics(model, loader, progress=sys.stderr.isatty())
    scores = {}
    for method in methods:
        criterion, _ = METHODS[method]
        for seed in (seeds if criterion == "random" else [None]):
            scores[(method, seed)] = neuron_scores(model, criterion, loader, stats=stats, seed=seed or 0)
    return stats, scores


def _early_share(removed: dict[int, list[int]]) -> float:
    """Share of the removed neurons that sit in the first half of the blocks (the paper's Fig. 6 contrast)."""
    blocks = sorted(removed)
    early = sum(len(removed[b]) for b in blocks[: len(blocks) // 2])
    return early / max(1, sum(len(r) for r in removed.values()))


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every (ratio, method, seed): prune, evaluate, fine-tune, evaluate."""
    from vitprune.models.zoo import trained_digits_vit

    torch.manual_seed(0)
    dense = trained_digits_vit(progress=sys.stderr.isatty())
    size = vitprune.get_adapter(dense).input_size
    train, val = (build_dataset("digits", split, input_size=size) for split in ("train", "val"))
    calibration = build_loader(build_dataset("digits", "train", input_size=size, is_training=False), 64,
                               shuffle=False, seed=0)
    val_loader = build_loader(val, 256, shuffle=False, seed=0)
    dense_metrics = evaluate(dense, val_loader)
    start = time.perf_counter()
    stats, scores = _scores(dense, calibration, args.methods, args.seeds)
    scoring_s = time.perf_counter() - start
    tune = TrainConfig(epochs=args.epochs, lr=args.lr, batch_size=64, weight_decay=0.01)
    rows = []
    for ratio in args.ratios:
        for method in args.methods:
            criterion, compensate = METHODS[method]
            for seed in args.seeds:
                key = (method, seed if criterion == "random" else None)
                removed = select_neurons(scores[key], ratio)
                pruned = copy.deepcopy(dense)
                prune_by_selection(pruned, removed, stats if compensate else None)
                right_after = evaluate(pruned, val_loader)
                start = time.perf_counter()
                finetune_pruned(pruned, train, None, replace(tune, seed=seed), teacher=dense,
                                distill="soft", alpha=1.0)
                row = {"ratio": ratio, "method": method, "seed": seed, "top1_pruned": right_after["top1"],
                       "loss_pruned": right_after["loss"],
                       "top1_finetuned": evaluate(pruned, val_loader)["top1"],
                       "finetune_s": time.perf_counter() - start, "early_share": _early_share(removed),
                       "params": count_macs(pruned).params}
                print(f"{ratio:.0%} {method:>12} seed {seed}: pruned {100 * row['top1_pruned']:.2f}%  "
                      f"fine-tuned {100 * row['top1_finetuned']:.2f}%", flush=True)
                rows.append(row)
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "checkpoint": "digits-vit (vitprune, trained)",
            "dense_top1": dense_metrics["top1"], "dense_loss": dense_metrics["loss"],
            "dense_params": count_macs(dense).params, "scoring_s": scoring_s,
            "calibration_images": len(calibration.dataset),
            "finetune": {**asdict(tune), "distill": "soft", "alpha": 1.0, "tau": 1.0}, "seeds": args.seeds,
            "torch": torch.__version__, "threads": torch.get_num_threads(), "rows": rows}


def _summary(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Mean and range over seeds of each (ratio, method)."""
    groups: dict[tuple[float, str], list[dict]] = {}
    for row in report["rows"]:
        groups.setdefault((row["ratio"], row["method"]), []).append(row)
    out = []
    for (ratio, method), rows in groups.items():
        entry = {"ratio": ratio, "method": method, "params": rows[0]["params"], "n": len(rows),
                 "early_share": statistics.mean(r["early_share"] for r in rows)}
        for key in ("top1_pruned", "loss_pruned", "top1_finetuned"):
            values = [r[key] for r in rows]
            entry[key] = {"mean": statistics.mean(values), "min": min(values), "max": max(values)}
        out.append(entry)
    return out


def to_markdown(report: dict[str, Any]) -> str:
    """The table of accuracies, with the recipe and starting checkpoint."""
    tune = report["finetune"]
    lines = [
        "# VBP against its baselines on the digits ViT",
        "",
        f"Starting checkpoint: {report['checkpoint']}, top-1 {100 * report['dense_top1']:.2f}% on the digits",
        f"validation split ({report['dense_params']:,} params). Statistics and SNIP gradients from one pass over the",
        f"{report['calibration_images']} training images (evaluation transform; {report['scoring_s']:.1f} s for all",
        f"criteria). Fine-tuning: {tune['epochs']} epochs, AdamW lr {tune['lr']}, batch {tune['batch_size']}, weight",
        f"decay {tune['weight_decay']}, soft distillation from the unpruned model (alpha {tune['alpha']}); seeds",
        f"{report['seeds']} (random selection uses the same seed). torch {report['torch']}, {report['threads']} "
        f"threads; {report['date']}.",
        "",
        "Top-1 (%) as mean over seeds [min-max]; *right after* = one-shot, before any fine-tuning (the paper's",
        "retention), with the validation cross-entropy then (finer-grained than top-1 on 360 images; dense:",
        f"{report['dense_loss']:.4f}). *Early share* = share of the removed neurons in the first half of the blocks.",
        "",
        "| Ratio | Method | Params | Right after pruning | Loss right after | After fine-tuning | Early share |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for e in _summary(report):
        cells = [f"{100 * e[k]['mean']:.2f} [{100 * e[k]['min']:.2f}-{100 * e[k]['max']:.2f}]"
                 for k in ("top1_pruned", "top1_finetuned")]
        lines.append(f"| {e['ratio']:.0%} | {e['method']} | {e['params']:,} | {cells[0]} | "
                     f"{e['loss_pruned']['mean']:.4f} | {cells[1]} | {e['early_share']:.2f} |")
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    """Accuracy against ratio, one line per method: right after pruning (solid) and fine-tuned (dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = _summary(report)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=False)
    for method in dict.fromkeys(e["method"] for e in summary):
        entries = sorted((e for e in summary if e["method"] == method), key=lambda e: e["ratio"])
        ratios = [100 * e["ratio"] for e in entries]
        for ax, key in zip(axes, ("top1_pruned", "top1_finetuned"), strict=True):
            ax.plot(ratios, [100 * e[key]["mean"] for e in entries], "o-", label=method)
    for ax, title in zip(axes, ("right after pruning", "after fine-tuning"), strict=True):
        ax.axhline(100 * report["dense_top1"], color="gray", ls=":", label="dense")
        ax.set(xlabel="MLP neurons removed (%)", ylabel="top-1 (%)", title=f"digits-vit: {title}")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    with atomic_file(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    """Run, then write the JSON, Markdown and plot."""
    args = parse_args(argv)
    report = run(args)
    write_results(args.out_dir, "vbp_digits", report, to_markdown(report))
    plot(report, args.out_dir / "vbp_digits.png")
    print(f"wrote {args.out_dir / 'vbp_digits'}.png")


if __name__ == "__main__":
    main()
