"""How many images a stable Taylor ranking needs: width pruning's pruned set and rank order against the image count.

On the trained digits model (``vitprune.create_model("digits-vit", pretrained=True)``, trained once and cached;
nothing downloaded), with training images under the evaluation transform, as ``run_width`` takes them:

* **overlap with the full ranking**: the share of what ``plan_width`` (taylor importance, the width defaults
  but whole heads: on this 3-head model a noisy ranking can take every head of a block, which the planner
  refuses) removes at each ratio from N random images that it also removes from all 1,437 training images
  (embedding channels, head dimensions and FFN neurons, each counted once);
* **split-half overlap**: the same share between two disjoint random sets of N images (no reference needed);
* **Kendall tau**: of torch-pruning's Taylor group importances from N images against all images, averaged
  over the dependency groups (embedding channels, each block's attention dimensions and FFN neurons).

Each figure is the mean (and the minimum) over ``--draws`` random draws. Writes
``<out-dir>/taylor_stability.{json,md}``.

    python benchmarks/taylor_stability.py        # about 10 minutes on 2 CPU cores, after the digits model trains once
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch
from profile_deit import write_results
from scipy.stats import kendalltau
from torch import nn
from torch.utils.data import Subset

import vitprune
from vitprune.data import build_dataset, build_loader
from vitprune.methods.width import WidthConfig, plan_width, taylor_gradients, taylor_scores

SIZES = (16, 32, 64, 128, 256, 512, 704)
RATIOS = (0.3, 0.5)
BATCH = 64


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=5, help="random draws per image count")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    return parser.parse_args(argv)


def _batches(dataset, indices: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return list(build_loader(Subset(dataset, indices), BATCH, shuffle=False, seed=0))


def _removed(model: nn.Module, ratio: float, batches) -> set[tuple]:
    """What the width defaults but whole heads remove at ``ratio`` with taylor importance from ``batches``, one
    tuple per unit."""
    options = {**WidthConfig(ratio=ratio).plan_options(), "importance": "taylor", "heads": 0.0}
    plan = plan_width(model, ratio, batches=batches, **options)
    adapter = vitprune.get_adapter(model)
    views = adapter.blocks()
    gone = {("embed", c) for c in set(range(adapter.embed_dim)) - set(plan.embed or range(adapter.embed_dim))}
    for b, keep in plan.head_dims.items():
        gone |= {("dim", b, d) for d in set(range(views[b].attn.head_dim)) - set(keep)}
    for b, keep in plan.neurons.items():
        gone |= {("neuron", b, j) for j in set(range(views[b].mlp.hidden_features)) - set(keep)}
    return gone


def _importances(model: nn.Module, batches) -> list[torch.Tensor]:
    """torch-pruning's Taylor importance of every dependency group (the classifier left out), in graph order."""
    return taylor_scores(model, taylor_gradients(model, batches))


def _tau(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return sum(kendalltau(x.numpy(), y.numpy()).statistic for x, y in zip(a, b)) / len(a)


def _share(found: set, reference: set) -> float:
    return len(found & reference) / len(reference)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every image count, ``args.draws`` draws each."""
    model = vitprune.create_model("digits-vit", pretrained=True)
    train = build_dataset("digits", "train", input_size=vitprune.get_adapter(model).input_size, is_training=False)
    everything = _batches(train, list(range(len(train))))
    reference = {ratio: _removed(model, ratio, everything) for ratio in RATIOS}
    reference_imp = _importances(model, everything)
    rows = []
    for size in SIZES:
        stats: dict[str, list[float]] = {"tau": []} | {f"full_{r}": [] for r in RATIOS} | {f"half_{r}": []
                                                                                         for r in RATIOS}
        for draw in range(args.draws):
            order = torch.randperm(len(train), generator=torch.Generator().manual_seed(1000 * size + draw)).tolist()
            first, second = _batches(train, order[:size]), _batches(train, order[size:2 * size])
            stats["tau"].append(_tau(_importances(model, first), reference_imp))
            for ratio in RATIOS:
                found = _removed(model, ratio, first)
                stats[f"full_{ratio}"].append(_share(found, reference[ratio]))
                stats[f"half_{ratio}"].append(_share(found, _removed(model, ratio, second)))
        rows.append({"images": size, **{k: {"mean": sum(v) / len(v), "min": min(v)} for k, v in stats.items()}})
        print(f"{size} images: " + ", ".join(f"{k} {v['mean']:.3f}" for k, v in rows[-1].items() if k != "images"),
              flush=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "model": "digits-vit (trained)",
            "train_images": len(train), "draws": args.draws, "ratios": list(RATIOS),
            "removed_at_ratio": {str(r): len(reference[r]) for r in RATIOS}, "rows": rows}


def to_markdown(report: dict[str, Any]) -> str:
    """One row per image count."""
    ratios = report["ratios"]
    units = ", ".join(f"{n} units at r={r}" for r, n in report["removed_at_ratio"].items())
    head = " | ".join(f"overlap with all, r={r} | split-half, r={r}" for r in ratios)
    lines = [
        "# Taylor importance: ranking stability against the number of images (digits model)",
        "",
        f"{report['model']}, its {report['train_images']} training images under the evaluation transform, "
        f"{report['draws']} random draws per row (mean, with the minimum in brackets). Overlap: the share of the "
        "units (embedding channels, head dimensions, FFN neurons) the width defaults but whole heads remove from N "
        "images "
        f"that they also remove from all images ({units}); "
        "split-half: between two disjoint draws of N images. Kendall tau: torch-pruning's Taylor group importances "
        f"from N images against all images, averaged over the dependency groups. {report['date']}.",
        "",
        f"| images | Kendall tau | {head} |",
        "|---:|---:|" + "---:|" * (2 * len(ratios)),
    ]
    for row in report["rows"]:
        cells = [f"{row['images']}", f"{row['tau']['mean']:.3f} ({row['tau']['min']:.3f})"]
        for r in ratios:
            for key in (f"full_{r}", f"half_{r}"):
                cells.append(f"{row[key]['mean']:.3f} ({row[key]['min']:.3f})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Run and write the JSON and Markdown."""
    args = parse_args(argv)
    report = run(args)
    write_results(args.out_dir, "taylor_stability", report, to_markdown(report))
    print(to_markdown(report))


if __name__ == "__main__":
    main()
