"""HetDPT+'s structural budgets: width ratios on top of the 10-layer depth configuration that reproduce the
MACs and params of the HetDPT paper's Table 2 rows (3.7G / 20.0M, 2.4G / 13.2M, 1.1G / 6.2M from DeiT-B).

The starting point is the paper's DeiT-B 10-layer configuration (attention removed in blocks 0, 3, 7, 8 and
11, GELU in blocks 2, 7, 8, 10 and 11; note §3.5) on the distilled DeiT-B architecture, whose counts the
paper's pruned rows match (note §1.8.4). torch-pruning's isomorphic magnitude ranking then prunes embedding
channels, head dimensions and FFN neurons at one global ratio, found by bisection so that the MACs land
at or just under each target. MACs are counted as the paper's pruned rows are: Linear/Conv only, N = 198
tokens (``convention="linear"``); the full count (with attention matmuls) is given beside them. The paper
does not say which importance or per-group ratios it used (note §1.10), so this checks structure only:
random weights, nothing downloaded. Writes ``<out-dir>/hetdpt_plus_budgets.{json,md}``.

    python benchmarks/hetdpt_plus_budgets.py          # about 2 minutes on 2 CPU cores
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path
from typing import Any

import timm
import torch
from profile_deit import write_results

import vitprune
from vitprune.measure import count_macs
from vitprune.methods.width import prune_width_to_macs
from vitprune.surgery import prune_depth

MODEL = "deit_base_distilled_patch16_224"
DEPTH = {"attention": [0, 3, 7, 8, 11], "activation": [2, 7, 8, 10, 11]}
#: The paper's HetDPT+ rows (Table 2): GMACs, params (M).
PAPER = [(3.7, 20.0), (2.4, 13.2), (1.1, 6.2)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=14, help="bisection steps on the width ratio")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The depth-pruned model, then one width-pruned model per Table 2 row."""
    torch.manual_seed(0)
    depth = vitprune.track(timm.create_model(MODEL, pretrained=False).eval(), MODEL)
    dense = count_macs(depth, convention="linear")
    prune_depth(depth, **DEPTH)
    base = count_macs(depth, convention="linear")
    rows = []
    for gmacs, params in PAPER:
        model = copy.deepcopy(depth)
        start = time.perf_counter()
        ratio, plan = prune_width_to_macs(model, gmacs * 1e9, convention="linear", steps=args.steps)
        report = count_macs(model, convention="linear")
        rows.append({
            "paper_gmacs": gmacs, "paper_params_m": params, "ratio": ratio,
            "gmacs": report.macs / 1e9, "gmacs_full": count_macs(model).macs / 1e9, "params_m": report.params / 1e6,
            "embed_dim": vitprune.get_adapter(model).embed_dim,
            "head_dims": {b: len(k) for b, k in sorted(plan.head_dims.items())},
            "neurons": {b: len(k) for b, k in sorted(plan.neurons.items())},
            "seconds": time.perf_counter() - start,
        })
        print(f"{gmacs}G: ratio {ratio:.4f} -> {rows[-1]['gmacs']:.3f} GMACs, {rows[-1]['params_m']:.2f} M params",
              flush=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "model": MODEL, "depth": DEPTH,
            "dense": {"gmacs": dense.macs / 1e9, "params_m": dense.params / 1e6},
            "depth_pruned": {"gmacs": base.macs / 1e9, "params_m": base.params / 1e6},
            "importance": "magnitude (L1), isomorphic, global", "rows": rows}


def to_markdown(report: dict[str, Any]) -> str:
    """The table of targets, ratios and what they reach, with the deviation from the paper."""
    dense, depth = report["dense"], report["depth_pruned"]
    lines = [
        "# HetDPT+ budgets: width ratios on the 10-layer depth configuration (DeiT-B, HetDPT Table 2)",
        "",
        f"Starting point: `{report['model']}` (random weights; {dense['gmacs']:.3f} GMACs, {dense['params_m']:.2f} M "
        f"params), attention removed in blocks {report['depth']['attention']}, GELU in "
        f"{report['depth']['activation']} (merged): {depth['gmacs']:.3f} GMACs, {depth['params_m']:.2f} M params "
        "(paper: 10.5 G, 54.9 M).",
        f"Width: torch-pruning, {report['importance']} ranking of embedding channels, head dimensions and FFN "
        "neurons at one ratio, bisected to the target from below. MACs: Linear/Conv only, N = 198 (the paper's "
        f"convention for pruned rows); *full* adds the attention matmuls. {report['date']}.",
        "",
        "| Table 2 row | width ratio | GMACs (linear) | vs paper | GMACs (full) | params (M) | vs paper | embed dim |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["rows"]:
        lines.append(
            f"| HetDPT+ {row['paper_gmacs']}G / {row['paper_params_m']}M | {row['ratio']:.4f} | {row['gmacs']:.3f} | "
            f"{100 * (row['gmacs'] / row['paper_gmacs'] - 1):+.1f}% | {row['gmacs_full']:.3f} | "
            f"{row['params_m']:.2f} | {100 * (row['params_m'] / row['paper_params_m'] - 1):+.1f}% | "
            f"{row['embed_dim']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Run and write the JSON and Markdown."""
    args = parse_args(argv)
    report = run(args)
    write_results(args.out_dir, "hetdpt_plus_budgets", report, to_markdown(report))
    print(to_markdown(report))


if __name__ == "__main__":
    main()
