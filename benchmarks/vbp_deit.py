"""VBP on DeiT: structure against the paper's Table 1, cost of the statistics pass, and measured speedup.

1. Params and MACs (both conventions) of DeiT-T 45%, DeiT-S 50%, DeiT-B 55% and 20% next to the
   paper's Table 1 rows.
2. Cost of VBP's statistics pass (post-activation mean and variance of every MLP neuron, float64)
   against plain inference on the same batch: alternating pairs, time(statistics) / time(plain)
   pair by pair. The target is at most 1.15x.
3. Paired speedup of DeiT-B pruned by 55% against its dense original, next to the MAC ratio
   (paper: 1.44x on an H200).

Weights are random (speed and MACs do not depend on them; nothing is downloaded). The neurons
removed in 3 are chosen by VBP itself: statistics of random images through the random-weight
model, then the global variance ranking. Writes ``<out-dir>/vbp_deit_<device>.json`` and ``.md``.

    python benchmarks/vbp_deit.py                           # CPU, fp32
    python benchmarks/vbp_deit.py --device cuda --batch-size 256
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch
from profile_deit import DTYPES, results_stem, write_results
from torch import nn

import vitprune
from vitprune.measure import CONVENTIONS, compare_speed, count_macs
from vitprune.methods.vbp import mlp_statistics, prune_by_selection, select_neurons

#: Paper Table 1 rows: label -> (timm name, ratio, paper params M dense/pruned, paper GMACs dense/pruned).
ROWS = {
    "DeiT-T 45%": ("deit_tiny_patch16_224", 0.45, (5.72, 4.12), (1.26, 0.94)),
    "DeiT-S 50%": ("deit_small_patch16_224", 0.50, (22.05, 14.96), (4.61, 3.21)),
    "DeiT-B 55%": ("deit_base_patch16_224", 0.55, (86.57, 55.40), (17.58, 11.44)),
    "DeiT-B 20%": ("deit_base_patch16_224", 0.20, (86.57, 75.24), (17.58, 15.35)),
}
PAPER_SPEEDUP = {"DeiT-B 55%": 1.44}
STATISTICS_MODELS = {"DeiT-T": "deit_tiny_patch16_224", "DeiT-S": "deit_small_patch16_224",
                     "DeiT-B": "deit_base_patch16_224"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="'cpu' or 'cuda' (default: cpu)")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=10, help="alternating timed pairs per measurement")
    parser.add_argument("--warmup", type=int, default=2, help="untimed pairs first")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--statistics-models", nargs="+", default=list(STATISTICS_MODELS),
                        choices=list(STATISTICS_MODELS))
    parser.add_argument("--speed-rows", nargs="*", default=["DeiT-B 55%"], choices=list(ROWS))
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    return parser.parse_args(argv)


class StatisticsPass(nn.Module):
    """One batch of VBP's statistics pass as a module, so ``compare_speed`` can pair it with plain inference."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> dict:
        return mlp_statistics(self.model, [(x, None)])


def structure(label: str) -> dict[str, Any]:
    """Params and MACs of the dense and the VBP-pruned DeiT (random scores: the structure depends on the count only)."""
    name, ratio, params, gmacs = ROWS[label]
    model = vitprune.create_model(name)
    dense = count_macs(model).totals()
    hidden = {v.index: v.mlp.hidden_features for v in vitprune.get_adapter(model).blocks()}
    generator = torch.Generator().manual_seed(0)
    removed = select_neurons({b: torch.rand(h, generator=generator) for b, h in hidden.items()}, ratio)
    prune_by_selection(model, removed)
    return {"row": label, "timm_name": name, "ratio": ratio, "removed": sum(map(len, removed.values())),
            "dense": dense, "pruned": count_macs(model).totals(),
            "paper": {"params_m": params, "gmacs": gmacs}}


def statistics_cost(label: str, args: argparse.Namespace) -> dict[str, Any]:
    """time(statistics pass) / time(plain inference), pair by pair."""
    model = vitprune.create_model(STATISTICS_MODELS[label])
    comparison = compare_speed(StatisticsPass(model), model, input_size=vitprune.get_adapter(model).input_size,
                               batch_size=args.batch_size, device=args.device, dtype=DTYPES[args.dtype],
                               warmup=args.warmup, pairs=args.pairs, threads=args.threads,
                               progress=sys.stderr.isatty())
    costs = sorted(1 / r for r in comparison.ratios)
    result = {"model": label, "timm_name": STATISTICS_MODELS[label], **comparison.to_dict(),
              "cost": _median(costs), "cost_q1": costs[len(costs) // 4], "cost_q3": costs[(3 * len(costs)) // 4]}
    print(f"{label} statistics pass: {result['cost']:.3f}x plain inference", flush=True)
    return result


def _median(values: list[float]) -> float:
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def speed(label: str, args: argparse.Namespace) -> dict[str, Any]:
    """Paired speedup of the VBP-pruned DeiT over its dense original."""
    name, ratio, _, _ = ROWS[label]
    dense = vitprune.create_model(name)
    pruned = vitprune.create_model(name)
    pruned.load_state_dict(dense.state_dict())
    generator = torch.Generator().manual_seed(0)
    images = [(torch.randn(8, *vitprune.get_adapter(dense).input_size, generator=generator), None) for _ in range(2)]
    stats = mlp_statistics(pruned, images)
    removed = select_neurons({b: s.var for b, s in stats.items()}, ratio)
    prune_by_selection(pruned, removed, stats)
    mac_ratio = count_macs(dense).macs / count_macs(pruned).macs
    comparison = compare_speed(pruned, dense, batch_size=args.batch_size, device=args.device,
                               dtype=DTYPES[args.dtype], warmup=args.warmup, pairs=args.pairs,
                               threads=args.threads, progress=sys.stderr.isatty())
    print(f"{label}: {comparison}; MAC ratio {mac_ratio:.3f}", flush=True)
    widths = {b: vitprune.get_adapter(pruned).block(b).mlp.hidden_features for b in sorted(removed)}
    return {"row": label, "timm_name": name, "mac_ratio_full": mac_ratio, "widths": widths,
            "speedup_over_mac_ratio": comparison.speedup / mac_ratio, "paper": PAPER_SPEEDUP.get(label),
            **comparison.to_dict()}


def _g(n: int) -> str:
    return f"{n / 1e9:.3f}"


def _load(*parts: dict) -> float:
    return max([p["other_load"] for p in parts if p["other_load"] is not None] + [0.0])


def to_markdown(report: dict[str, Any]) -> str:
    """The three tables, with their conventions, context and starting checkpoints."""
    env = report["environment"]
    context = (f"{env['device_name']} ({env['device']}), {env['dtype']}, batch {report['batch_size']}, "
               f"{env['threads']} threads, torch {env['torch']}, timm {env['timm']}, vitprune {env['vitprune']}; "
               f"{report['pairs']} alternating pairs after {report['warmup']} warm-up pairs; {report['date']}.")
    lines = [
        "# VBP on DeiT: structure, statistics-pass cost and measured speedup",
        "",
        "Starting checkpoints: timm's DeiT architectures with random weights (structure and speed do not depend on",
        "the weights). Neurons removed: ceil(p x all MLP hidden neurons), ranked globally.",
        "",
        f"MACs per image at 3x224x224: *full* = {CONVENTIONS['full']}; *linear* = {CONVENTIONS['linear']}.",
        "",
        "## Structure against the paper's Table 1",
        "",
        "| Row | Neurons removed | Params dense → pruned (M) | GMACs full dense → pruned | "
        "GMACs linear dense → pruned | Paper: params (M), GMACs |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in report["structure"]:
        d, q, p = r["dense"], r["pruned"], r["paper"]
        lines.append(f"| {r['row']} | {r['removed']} | {d['params'] / 1e6:.2f} → {q['params'] / 1e6:.2f} | "
                     f"{_g(d['macs_full'])} → {_g(q['macs_full'])} | {_g(d['macs_linear'])} → {_g(q['macs_linear'])} "
                     f"| {p['params_m'][0]} → {p['params_m'][1]}, {p['gmacs'][0]} → {p['gmacs'][1]} |")
    lines += [
        "",
        "Every params figure matches the paper to its printed precision. The paper's GMACs are the *full*",
        "convention, 0.01-0.02 G higher throughout: its dense models are 1.26, 4.61 and 17.58 G where this counter",
        "(checked against torch's FlopCounterMode) gives 1.254, 4.599 and 17.564 G; the removed MACs agree exactly",
        "(197 tokens x 2C per neuron).",
        "",
        "## Cost of the statistics pass",
        "",
        "Plain inference against the same forward pass with VBP's statistics hooks (post-activation mean and",
        "unbiased variance of every MLP neuron over every token, accumulated in float64). " + context,
        "",
        "| Model | Plain ms/batch | Statistics ms/batch | Cost: statistics / plain, median [IQR] | Other CPU load |",
        "|---|---:|---:|---:|---:|",
    ]
    for s in report["statistics"]:
        lines.append(f"| {s['model']} | {s['b']['median_ms']:.1f} | {s['a']['median_ms']:.1f} | "
                     f"{s['cost']:.3f} [{s['cost_q1']:.3f}-{s['cost_q3']:.3f}] | {_load(s['a'], s['b']):.1%} |")
    if report["speed"]:
        lines += [
            "",
            "## Measured speedup of the pruned model",
            "",
            context + " Speedup = dense time / pruned time per pair.",
            "",
            "| Row | Dense ms/batch | Pruned ms/batch | Speedup, median [IQR] | MAC ratio (full) | Speedup / MAC ratio "
            "| Paper speedup (H200) | Other CPU load |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for s in report["speed"]:
            lines.append(f"| {s['row']} | {s['b']['median_ms']:.1f} | {s['a']['median_ms']:.1f} | "
                         f"{s['speedup']:.3f} [{s['speedup_q1']:.3f}-{s['speedup_q3']:.3f}] | "
                         f"{s['mac_ratio_full']:.3f} | {s['speedup_over_mac_ratio']:.3f} | {s['paper'] or ''} | "
                         f"{_load(s['a'], s['b']):.1%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Check the structure, time the pairs, write the JSON and Markdown results."""
    args = parse_args(argv)
    structures = [structure(label) for label in ROWS]
    statistics = [statistics_cost(label, args) for label in args.statistics_models]
    speeds = [speed(label, args) for label in args.speed_rows]
    env = (statistics or speeds)[0]["a"]["context"]
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "environment": {k: v for k, v in env.items() if k != "batch_size"},
        "batch_size": args.batch_size, "pairs": args.pairs, "warmup": args.warmup,
        "structure": structures, "statistics": statistics, "speed": speeds,
    }
    write_results(args.out_dir, results_stem("vbp_deit", args.device, args.dtype), report, to_markdown(report))


if __name__ == "__main__":
    main()
