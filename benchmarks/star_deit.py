"""STAR on DeiT: MACs against the paper, measured speedup at rho = 0.7, and the cost of the LRP prior.

1. Dense MACs of DeiT-T/S/B and of the hand-set schedules of the paper's Table 2 (DeiT-B, pruning
   blocks [4,7,10] or [5,8,10], 1-based, per-layer rates r, r², r³) next to the printed GFLOPs.
2. Paired CPU speedup of a token-pruned DeiT-S against dense at rho = 0.7, next to the MAC ratio
   (target: at least 0.85 of it). Weights are random, so a random-weight ACS would mean nothing; the
   schedule uses the ACS profile the implementation note fits to the paper's DeiT-S GFLOPs,
   ``(l/(L-1))^0.56``. Tokens are picked by the blocks' own [CLS] attention.
3. The LRP prior's cost: one forward, one backward and one relevance pass per (batch, class),
   with all start layers' products formed from the same factors, against the reference code's
   approach of rerunning that pass once per start layer (timed here as L runs of the same pass).

Nothing is downloaded. Writes ``<out-dir>/star_deit_<device>.json`` and ``.md``.

    python benchmarks/star_deit.py                      # CPU, fp32, batch 16; about 5 minutes
    python benchmarks/star_deit.py --fit-gamma          # LV-ViT's ACS profiles (ACS_GAMMA) refitted
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path
from typing import Any

import torch
from profile_deit import DTYPES, results_stem, write_results

import vitprune
from vitprune.measure import CONVENTIONS, compare_speed, count_macs
from vitprune.methods.star import apply_keep_rates, inter_layer_scores, keep_rates
from vitprune.surgery import prune_tokens

DENSE = {"DeiT-T": ("deit_tiny_patch16_224", 1.3), "DeiT-S": ("deit_small_patch16_224", 4.6),
         "DeiT-B": ("deit_base_patch16_224", 17.6)}
#: Paper Table 2: (1-based pruning blocks, base rate r, printed GFLOPs).
TABLE2 = [([4, 7, 10], 0.5, 7.8), ([5, 8, 10], 0.7, 11.0), ([4, 7, 10], 0.7, 10.2)]
#: LV-ViT (vitprune's model, STAR Tables 1, 5 and 7): its name, the dense GFLOPs printed and, per rho, the static
#: schedule's GFLOPs printed with where (Table 5 sweeps rho; Tables 1 and 7 use 0.65 for S and 0.8 for M). STAR's
#: code runs LV-ViT with its class head alone (notes/star.md §1): :data:`LVVIT_KWARGS` builds it so.
LVVIT_KWARGS = {"aux_head": False}
LVVIT = {
    "LV-ViT-S": ("lvvit-s", 6.5, {0.9: (5.0, "Table 5"), 0.8: (4.0, "Table 5"), 0.7: (3.4, "Table 5"),
                                  0.65: (3.2, "Tables 1, 7"), 0.6: (3.0, "Table 5")}),
    "LV-ViT-M": ("lvvit-m", 12.6, {0.9: (8.8, "Table 5"), 0.8: (6.7, "Tables 1, 5, 7"), 0.7: (5.5, "Table 5"),
                                   0.6: (4.7, "Table 5")}),
}
#: gamma of the normalised ACS profile ``(l/(L-1))^gamma`` fitted to the paper's GFLOPs: DeiT's from notes/star.md
#: §1.10 (Table 4); LV-ViT's fitted here to its printed rows (:func:`fit_gamma`, ``--fit-gamma``: least squares over
#: 0.20-1.00 by 0.05; the note fits no LV-ViT profile).
ACS_GAMMA = {"DeiT-B": 0.6, "DeiT-S": 0.56, "DeiT-T": 0.42, "LV-ViT-S": 0.45, "LV-ViT-M": 0.5}


def fitted_acs(blocks: int, gamma: float) -> list[float]:
    """The note's fitted ACS profile ``(l/(L-1))^gamma``: it stands in for the trained model's measured ACS, which
    random weights cannot give."""
    return [(i / (blocks - 1)) ** gamma for i in range(blocks)]


def static_star(model: torch.nn.Module, gamma: float, rho: float) -> tuple[torch.nn.Module, list[float]]:
    """A copy of ``model`` under STAR's static schedule at ``rho`` for the profile :func:`fitted_acs` ``gamma``,
    tokens ranked by [CLS] attention alone, and the schedule's keep rates."""
    pruned = copy.deepcopy(model)
    rates = keep_rates(fitted_acs(len(vitprune.get_adapter(pruned).blocks()), gamma), rho)
    apply_keep_rates(pruned, rates, alpha=1.0)
    return pruned, rates


def fit_gamma(name: str, printed: dict[float, float], grid: list[float]) -> tuple[float, dict[float, float]]:
    """The ``gamma`` of ``grid`` whose schedules come closest (least squares) to ``printed`` GFLOPs per rho on
    vitprune model ``name`` (as STAR runs it: :data:`LVVIT_KWARGS`), with its GMACs per rho."""
    model = vitprune.create_model(name, **LVVIT_KWARGS)
    fits = {gamma: {rho: count_macs(static_star(model, gamma, rho)[0]).macs / 1e9 for rho in printed} for gamma in grid}
    best = min(fits, key=lambda g: sum((fits[g][rho] - p) ** 2 for rho, p in printed.items()))
    return best, fits[best]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rho", type=float, default=0.7)
    parser.add_argument("--lrp-images", type=int, default=2, help="images per LRP timing (one batch)")
    parser.add_argument("--lrp-classes", type=int, default=2)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--fit-gamma", action="store_true",
                        help="only fit LV-ViT's ACS profiles to the paper's rows and print them (about 30 s)")
    return parser.parse_args(argv)


def structure() -> dict[str, Any]:
    """Dense and Table 2 MACs (full convention)."""
    dense = {label: {"timm_name": name, "gmacs": count_macs(vitprune.create_model(name)).macs / 1e9, "paper": p}
             for label, (name, p) in DENSE.items()}
    schedules = []
    for blocks, rate, printed in TABLE2:
        model = vitprune.create_model("deit_base_patch16_224")
        for power, block in enumerate(blocks, start=1):
            prune_tokens(model, block - 1, rate**power)
        schedules.append({"blocks": blocks, "rate": rate, "paper": printed, "gmacs": count_macs(model).macs / 1e9})
    return {"dense": dense, "table2": schedules}


def speed(args: argparse.Namespace) -> dict[str, Any]:
    """Paired speedup of the token-pruned DeiT-S over dense."""
    dense = vitprune.create_model("deit_small_patch16_224")
    pruned, rates = static_star(dense, ACS_GAMMA["DeiT-S"], args.rho)
    mac_ratio = count_macs(dense).macs / count_macs(pruned).macs
    comparison = compare_speed(pruned, dense, batch_size=args.batch_size, device=args.device,
                               dtype=DTYPES[args.dtype], warmup=args.warmup, pairs=args.pairs,
                               progress=sys.stderr.isatty())
    print(f"DeiT-S rho {args.rho}: {comparison}; MAC ratio {mac_ratio:.3f}", flush=True)
    return {"rho": args.rho, "keep_rates": rates, "gmacs": count_macs(pruned).macs / 1e9, "mac_ratio_full": mac_ratio,
            "speedup_over_mac_ratio": comparison.speedup / mac_ratio, **comparison.to_dict()}


def lrp_cost(args: argparse.Namespace) -> dict[str, Any]:
    """Seconds of one LRP prior pass with shared suffix products, against L reruns of it."""
    model = vitprune.create_model("deit_small_patch16_224")
    images = torch.randn(args.lrp_images, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    batch = [(images, torch.zeros(len(images), dtype=torch.long))]
    inter_layer_scores(model, batch, classes=1)  # warm-up
    start = time.perf_counter()
    inter_layer_scores(model, batch, classes=args.lrp_classes)
    shared = time.perf_counter() - start
    blocks = len(model.blocks)
    start = time.perf_counter()
    for _ in range(blocks):
        inter_layer_scores(model, batch, classes=args.lrp_classes)
    rerun = time.perf_counter() - start
    print(f"LRP prior: {shared:.2f} s shared vs {rerun:.2f} s rerun per start layer", flush=True)
    return {"model": "DeiT-S", "images": args.lrp_images, "classes": args.lrp_classes, "blocks": blocks,
            "shared_s": shared, "rerun_s": rerun, "ratio": rerun / shared}


def to_markdown(report: dict[str, Any]) -> str:
    """The three tables with their context."""
    s, lrp = report["speed"], report["lrp"]
    env = s["a"]["context"]
    lines = [
        "# STAR on DeiT: MACs, measured speedup and the cost of the LRP prior",
        "",
        "Starting checkpoints: timm's DeiT architectures with random weights (structure and speed do not depend on",
        f"the weights). MACs per image at 3x224x224, *full* convention ({CONVENTIONS['full']}); the paper reports",
        "MACs (torchprofile) under the label GFLOPs.",
        "",
        "## Dense models and the paper's hand-set schedules (Table 2, DeiT-B)",
        "",
        "| Model / schedule | GMACs (vitprune) | Paper | Difference |",
        "|---|---:|---:|---:|",
    ]
    for label, d in report["structure"]["dense"].items():
        lines.append(f"| {label} dense | {d['gmacs']:.3f} | {d['paper']} | {d['gmacs'] - d['paper']:+.3f} |")
    for t in report["structure"]["table2"]:
        lines.append(f"| DeiT-B blocks {t['blocks']} at {t['rate']}, {t['rate']}², {t['rate']}³ | {t['gmacs']:.3f} | "
                     f"{t['paper']} | {100 * (t['gmacs'] - t['paper']) / t['paper']:+.1f}% |")
    lines += [
        "",
        "## Measured speedup, DeiT-S",
        "",
        (f"{env['device_name']} ({env['device']}), {env['dtype']}, batch {env['batch_size']}, {env['threads']} "
         f"threads, torch {env['torch']}; {s['pairs']} alternating pairs; {report['date']}. Keep rates "
         + ", ".join(f"{r:.2f}" for r in s["keep_rates"]) + "."),
        "",
        "| rho | Dense ms/batch | Pruned ms/batch | Speedup, median [IQR] | MAC ratio (full) | Speedup / MAC ratio |",
        "|---:|---:|---:|---:|---:|---:|",
        (f"| {s['rho']} | {s['b']['median_ms']:.1f} | {s['a']['median_ms']:.1f} | {s['speedup']:.3f} "
         f"[{s['speedup_q1']:.3f}-{s['speedup_q3']:.3f}] | {s['mac_ratio_full']:.3f} | "
         f"{s['speedup_over_mac_ratio']:.3f} |"),
        "",
        "## Cost of the LRP prior (DeiT-S)",
        "",
        f"{lrp['images']} images x {lrp['classes']} classes: {lrp['shared_s']:.2f} s with the suffix products formed "
        f"from one set of factors, {lrp['rerun_s']:.2f} s rerunning the pass for each of the {lrp['blocks']} start "
        f"layers ({lrp['ratio']:.1f}x).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Run all three parts and write the results."""
    args = parse_args(argv)
    if args.fit_gamma:
        for label, (name, _, rows) in LVVIT.items():
            gamma, gmacs = fit_gamma(name, {rho: printed for rho, (printed, _) in rows.items()},
                                     [round(0.05 * i, 2) for i in range(4, 21)])
            print(f"{label}: gamma {gamma}; GMACs " + ", ".join(f"rho {r}: {g:.2f}" for r, g in gmacs.items()))
        return
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "structure": structure(), "speed": speed(args),
              "lrp": lrp_cost(args)}
    write_results(args.out_dir, results_stem("star_deit", args.device, args.dtype), report, to_markdown(report))


if __name__ == "__main__":
    main()
