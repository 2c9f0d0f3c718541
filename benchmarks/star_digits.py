"""STAR's token scores compared on the digits ViT at an equal keep schedule, before and after a short fine-tune.

One ACS schedule (from the trained model's own ACS, anchors ``minmax``) is shared by every row, so
every row keeps the same number of tokens in every block and costs the same MACs. Only the score
that picks the tokens differs:

* ``fused``: STAR, ``alpha = 0.15`` (the paper's DeiT setting): online [CLS] attention x LRP prior;
* ``intra-only``: ``alpha = 1``, the block's [CLS] attention alone (EViT's score);
* ``inter-only``: ``alpha = 0``, the LRP prior alone (a fixed set of positions per block);
* ``random``: ``alpha = 0`` with a random prior (a random fixed set of positions per block, one per seed).

Each is evaluated right after pruning, then fine-tuned (default 2 epochs, AdamW lr 5e-4, hard
distillation from the unpruned model) over ``--seeds``. Starting checkpoint: vitprune's trained
``digits-vit`` (cached; trained on first use). Writes ``<out-dir>/star_digits.{json,md}``.

    python benchmarks/star_digits.py                     # about 5 minutes on 2 CPU cores
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
from vitprune.data import build_dataset, build_loader
from vitprune.measure import count_macs
from vitprune.methods.star import apply_keep_rates, average_cosine_similarity, inter_layer_scores, keep_rates
from vitprune.training import TrainConfig, evaluate, finetune_pruned

SCORES = ("fused", "intra-only", "inter-only", "random")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rhos", type=float, nargs="+", default=[0.7, 0.5, 0.3, 0.2])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--lrp-images", type=int, default=256)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    return parser.parse_args(argv)


def _setting(score: str, prior: torch.Tensor, seed: int) -> tuple[float, torch.Tensor]:
    if score == "fused":
        return 0.15, prior
    if score == "intra-only":
        return 1.0, prior
    if score == "inter-only":
        return 0.0, prior
    return 0.0, torch.rand(prior.shape, generator=torch.Generator().manual_seed(seed)) + 1e-3


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every (rho, score, seed): prune, evaluate, fine-tune, evaluate."""
    from vitprune.models.zoo import trained_digits_vit

    dense = trained_digits_vit(progress=sys.stderr.isatty())
    size = vitprune.get_adapter(dense).input_size
    train, val = (build_dataset("digits", split, input_size=size) for split in ("train", "val"))
    calibration = build_loader(build_dataset("digits", "train", input_size=size, is_training=False), 32,
                               shuffle=False, seed=0)
    val_loader = build_loader(val, 256, shuffle=False, seed=0)
    dense_top1 = evaluate(dense, val_loader)["top1"]
    start = time.perf_counter()
    acs = average_cosine_similarity(dense, calibration, max_images=500)
    acs_s = time.perf_counter() - start
    start = time.perf_counter()
    prior = inter_layer_scores(dense, calibration, classes=6, max_images=args.lrp_images,
                               progress=sys.stderr.isatty()).float()
    lrp_s = time.perf_counter() - start
    tune = TrainConfig(epochs=args.epochs, lr=args.lr, batch_size=64)
    rows = []
    for rho in args.rhos:
        rates = keep_rates(acs, rho, anchor="minmax")
        for score in SCORES:
            for seed in args.seeds:
                alpha, table = _setting(score, prior, seed)
                pruned = copy.deepcopy(dense)
                apply_keep_rates(pruned, rates, alpha=alpha, prior=table)
                right_after = evaluate(pruned, val_loader)
                finetune_pruned(pruned, train, None, replace(tune, seed=seed), teacher=dense, distill="hard",
                                alpha=0.5)
                row = {"rho": rho, "score": score, "seed": seed, "top1_pruned": right_after["top1"],
                       "loss_pruned": right_after["loss"], "top1_finetuned": evaluate(pruned, val_loader)["top1"],
                       "macs": count_macs(pruned).macs}
                print(f"rho {rho} {score:>10} seed {seed}: pruned {100 * row['top1_pruned']:.2f}%  "
                      f"fine-tuned {100 * row['top1_finetuned']:.2f}%", flush=True)
                rows.append(row)
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "checkpoint": "digits-vit (vitprune, trained)",
            "dense_top1": dense_top1, "dense_macs": count_macs(dense).macs, "acs": acs, "acs_s": acs_s,
            "lrp_s": lrp_s, "lrp_images": args.lrp_images, "finetune": {**asdict(tune), "distill": "hard",
                                                                        "alpha": 0.5},
            "seeds": args.seeds, "rates": {str(r): keep_rates(acs, r, anchor="minmax") for r in args.rhos},
            "torch": torch.__version__, "threads": torch.get_num_threads(), "rows": rows}


def to_markdown(report: dict[str, Any]) -> str:
    """The table, with the recipe and starting checkpoint."""
    tune = report["finetune"]
    lines = [
        "# STAR's token scores on the digits ViT at an equal keep schedule",
        "",
        f"Starting checkpoint: {report['checkpoint']}, top-1 {100 * report['dense_top1']:.2f}% on the digits",
        f"validation split, {report['dense_macs'] / 1e6:.2f} M MACs (full convention). ACS over 500 training images "
        f"({report['acs_s']:.1f} s); LRP prior over {report['lrp_images']} training images, top-6 classes "
        f"({report['lrp_s']:.1f} s).",
        f"Fine-tuning: {tune['epochs']} epochs, AdamW lr {tune['lr']}, batch {tune['batch_size']}, hard distillation",
        f"from the unpruned model (alpha {tune['alpha']}); seeds {report['seeds']}. torch {report['torch']}, "
        f"{report['threads']} threads; {report['date']}.",
        "",
        "Keep rates per block (ACS schedule, anchors minmax): "
        + "; ".join(f"rho {r}: " + ", ".join(f"{p:.2f}" for p in rates) for r, rates in report["rates"].items()),
        "",
        "Top-1 (%) as mean over seeds [min-max]; the validation loss right after pruning is finer-grained than top-1",
        "on 360 images.",
        "",
        "| rho | Score | MACs (M) | Right after pruning | Loss right after | After fine-tuning |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[float, str], list[dict]] = {}
    for row in report["rows"]:
        groups.setdefault((row["rho"], row["score"]), []).append(row)
    for (rho, score), rows in groups.items():
        cells = []
        for key in ("top1_pruned", "top1_finetuned"):
            values = [100 * r[key] for r in rows]
            cells.append(f"{statistics.mean(values):.2f} [{min(values):.2f}-{max(values):.2f}]")
        loss = statistics.mean(r["loss_pruned"] for r in rows)
        lines.append(f"| {rho} | {score} | {rows[0]['macs'] / 1e6:.2f} | {cells[0]} | {loss:.4f} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Run, then write the JSON and Markdown."""
    args = parse_args(argv)
    report = run(args)
    write_results(args.out_dir, "star_digits", report, to_markdown(report))


if __name__ == "__main__":
    main()
