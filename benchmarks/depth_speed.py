"""HetDPT depth pruning of DeiT-B and DeiT-S: structure against the paper's Table 1, and measured speedup.

Prunes the paper's published layer sets (attention [0,3,7,8,11] + GELU [2,7,8,10,11] for DeiT-B,
attention [1,7,10,11] + GELU [7,8,10,11] for DeiT-S) with ``vitprune.surgery.prune_depth``:

1. params and MACs in both conventions, for the distilled DeiTs the paper pruned and the plain
   ones, next to the paper's Table 1 rows;
2. paired throughput of each pruned plain DeiT against its dense original (alternating pairs,
   batch 16 fp32 on CPU by default; ``--device cuda --batch-size 256`` as in the paper), with the
   speedup set against the MAC ratio.

Weights are random (speed and MACs do not depend on them; nothing is downloaded). Writes
``<out-dir>/depth_<device>.json`` and ``.md``.

    python benchmarks/depth_speed.py                    # CPU, fp32, batch 16
    python benchmarks/depth_speed.py --device cuda --batch-size 256
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch
from profile_deit import DTYPES, results_stem, write_results

import vitprune
from vitprune.measure import CONVENTIONS, compare_speed, count_macs
from vitprune.surgery import prune_depth

#: Paper (HetDPT) Table 1 rows and their layer sets: name -> (timm name, attention, GELU, paper row).
CONFIGS = {
    "DeiT-B, 10 layers": ("deit_base_patch16_224", [0, 3, 7, 8, 11], [2, 7, 8, 10, 11],
                          {"params_m": 54.9, "gmacs": 10.5, "dense_params_m": 86.6, "dense_gmacs": 17.6,
                           "speedup": 1.58}),
    "DeiT-S, 8 layers": ("deit_small_patch16_224", [1, 7, 10, 11], [7, 8, 10, 11],
                         {"params_m": 15.9, "gmacs": 3.0, "dense_params_m": 22.1, "dense_gmacs": 4.6,
                          "speedup": 1.39}),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="'cpu' or 'cuda' (default: cpu)")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=10, help="alternating timed pairs per model")
    parser.add_argument("--warmup", type=int, default=2, help="untimed pairs first")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--models", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    return parser.parse_args(argv)


def _pair(name: str, attention: list[int], activation: list[int]) -> tuple[torch.nn.Module, torch.nn.Module]:
    dense = vitprune.create_model(name)
    pruned = vitprune.create_model(name)
    pruned.load_state_dict(dense.state_dict())
    prune_depth(pruned, attention, activation)
    return dense, pruned


def structure(label: str) -> dict[str, Any]:
    """Params and MACs of the plain and the distilled DeiT, dense and pruned."""
    name, attention, activation, paper = CONFIGS[label]
    rows = {}
    for variant, timm_name in (("plain", name), ("distilled", name.replace("_patch", "_distilled_patch"))):
        dense, pruned = _pair(timm_name, attention, activation)
        rows[variant] = {"timm_name": timm_name, "dense": count_macs(dense).totals(), "pruned": count_macs(pruned).totals()}
    return {"model": label, "attention": attention, "activation": activation, "paper": paper, **rows}


def speed(label: str, args: argparse.Namespace) -> dict[str, Any]:
    """Alternating-pair speedup of the pruned plain DeiT over its dense original."""
    name, attention, activation, _ = CONFIGS[label]
    dense, pruned = _pair(name, attention, activation)
    mac_ratio = count_macs(dense).macs / count_macs(pruned).macs
    comparison = compare_speed(pruned, dense, batch_size=args.batch_size, device=args.device,
                               dtype=DTYPES[args.dtype], warmup=args.warmup, pairs=args.pairs,
                               threads=args.threads, progress=sys.stderr.isatty())
    print(f"{label}: {comparison}; MAC ratio {mac_ratio:.3f}", flush=True)
    return {"model": label, "timm_name": name, "mac_ratio_full": mac_ratio,
            "speedup_over_mac_ratio": comparison.speedup / mac_ratio, **comparison.to_dict()}


def _g(n: int) -> str:
    return f"{n / 1e9:.3f}"


def to_markdown(report: dict[str, Any]) -> str:
    """Both tables, with their conventions, context and starting checkpoints."""
    env = report["environment"]
    lines = [
        "# HetDPT depth pruning of DeiT: structure and measured speedup",
        "",
        "Starting checkpoints: timm's DeiT architectures with random weights (structure and speed do not depend on",
        "the weights). Layer sets from the paper (0-based block indices). Pruned with `prune_depth` (attention",
        "identity `norm` = x + LN1(x), as the paper's code; LN1 is kept, so each removed attention saves 4D²+4D",
        "parameters and each removed GELU with its merge 7D²+4D).",
        "",
        f"MACs per image at 3x224x224: *full* = {CONVENTIONS['full']}; *linear* = {CONVENTIONS['linear']}.",
        "",
        "## Structure against the paper's Table 1",
        "",
        "| Model | Architecture | Params dense (M) | Params pruned (M) | GMACs full dense → pruned | "
        "GMACs linear dense → pruned | Paper: params (M), GMACs |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in report["structure"]:
        p = r["paper"]
        for variant in ("plain", "distilled"):
            d, q = r[variant]["dense"], r[variant]["pruned"]
            paper = (f"{p['dense_params_m']} → {p['params_m']}, {p['dense_gmacs']} → {p['gmacs']}"
                     if variant == "distilled" else "")
            lines.append(f"| {r['model']} | {r[variant]['timm_name']} | {d['params'] / 1e6:.3f} | "
                         f"{q['params'] / 1e6:.3f} | {_g(d['macs_full'])} → {_g(q['macs_full'])} | "
                         f"{_g(d['macs_linear'])} → {_g(q['macs_linear'])} | {paper} |")
    lines += [
        "",
        "Differences explained (see [docs/depth.md](../../docs/depth.md)): the paper's *pruned* rows are distilled",
        "DeiTs (an extra distillation token and head) counted in the *linear* convention at 198 tokens — vitprune's",
        "distilled rows reproduce them exactly (54.867M / 10.511 G and 15.936M / 2.978 G). Its *dense* rows (86.6M,",
        "17.6 G; 22.1M, 4.6 G) are the plain DeiTs in the *full* convention at 197 tokens. The two conventions differ",
        "by the attention matmuls: in one consistent convention (full, distilled) the pruned models are 10.93 G and",
        "3.22 G.",
        "",
        "## Measured speedup (pruned plain DeiT vs its dense original)",
        "",
        (f"{env['device_name']} ({env['device']}), {env['dtype']}, batch {report['batch_size']}, {env['threads']} "
         f"threads, torch {env['torch']}, timm {env['timm']}, vitprune {env['vitprune']}; {report['pairs']} "
         f"alternating pairs after {report['warmup']} warm-up pairs; {report['date']}. Speedup = dense time / "
         "pruned time per pair: median [IQR]."),
        "",
        "| Model | Dense ms/batch | Pruned ms/batch | Speedup | MAC ratio (full) | Speedup / MAC ratio | Paper speedup "
        "(H800, batch 256) | Other CPU load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r, s in zip(report["structure"], report["speed"], strict=True):
        load = max(x for x in (s["a"]["other_load"], s["b"]["other_load"], 0.0) if x is not None)
        lines.append(f"| {s['model']} | {s['b']['median_ms']:.1f} | {s['a']['median_ms']:.1f} | "
                     f"{s['speedup']:.3f} [{s['speedup_q1']:.3f}-{s['speedup_q3']:.3f}] | {s['mac_ratio_full']:.3f} | "
                     f"{s['speedup_over_mac_ratio']:.3f} | {r['paper']['speedup']} | {load:.1%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Check the structure, time the pairs, write the JSON and Markdown results."""
    args = parse_args(argv)
    structures = [structure(label) for label in args.models]
    speeds = [speed(label, args) for label in args.models]
    env = speeds[0]["a"]["context"]
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "environment": {k: v for k, v in env.items() if k != "batch_size"},
        "batch_size": args.batch_size, "pairs": args.pairs, "warmup": args.warmup,
        "structure": structures, "speed": speeds,
    }
    write_results(args.out_dir, results_stem("depth", args.device, args.dtype), report, to_markdown(report))


if __name__ == "__main__":
    main()
