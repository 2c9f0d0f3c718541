"""Families beyond DeiT at the papers' configurations: paired speedup against dense next to the MAC ratio.

Issue 25's families enter here as they land. So far LV-ViT under STAR's Table 1 settings: LV-ViT-S at rho 0.65 and
LV-ViT-M at rho 0.8, with the class head alone as STAR's code runs them (``lvvit-s-cls``, ``lvvit-m-cls``), keep
rates from the ACS profile fitted to the paper's rows (``star_deit.ACS_GAMMA``), tokens ranked by [CLS] attention.
Weights are random: speed and MACs do not depend on them, and nothing is downloaded.

Writes ``<out-dir>/families_speed_<device>.json`` and ``.md``.

    python benchmarks/families_speed.py                 # CPU, fp32, batch 16; about 3 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from profile_deit import DTYPES, results_stem, write_results
from star_deit import ACS_GAMMA, LVVIT, static_star

import vitprune
from vitprune.measure import CONVENTIONS, compare_speed, count_macs

#: (label, vitprune model, method, setting): the configurations timed. LV-ViT's rho is Table 1's.
CONFIGS = [
    ("LV-ViT-S", "lvvit-s-cls", "STAR", 0.65),
    ("LV-ViT-M", "lvvit-m-cls", "STAR", 0.8),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    return parser.parse_args(argv)


def measure(label: str, name: str, method: str, rho: float, args: argparse.Namespace) -> dict[str, Any]:
    """One configuration: its MACs before and after, and the pruned model timed against the dense one."""
    dense = vitprune.create_model(name)
    pruned, rates = static_star(dense, ACS_GAMMA[label], rho)
    before, after = count_macs(dense).totals(), count_macs(pruned).totals()
    mac_ratio = before["macs_full"] / after["macs_full"]
    comparison = compare_speed(pruned, dense, batch_size=args.batch_size, device=args.device,
                               dtype=DTYPES[args.dtype], warmup=args.warmup, pairs=args.pairs,
                               progress=sys.stderr.isatty())
    print(f"{label} {method} rho {rho}: {comparison}; MAC ratio {mac_ratio:.3f}", flush=True)
    printed = LVVIT[label][2][rho][0]
    return {"label": label, "model": name, "method": method, "rho": rho, "keep_rates": rates,
            "gamma": ACS_GAMMA[label], "paper_gflops": printed, "before": before, "after": after,
            "mac_ratio_full": mac_ratio, "speedup_over_mac_ratio": comparison.speedup / mac_ratio,
            **comparison.to_dict()}


def to_markdown(report: dict[str, Any]) -> str:
    """The table with its context."""
    rows = report["rows"]
    env = rows[0]["a"]["context"]
    lines = [
        "# Families beyond DeiT: measured speedup against the MAC ratio",
        "",
        "Starting checkpoints: vitprune's LV-ViT-S and LV-ViT-M with random weights, class head alone as STAR's code "
        "runs them (`lvvit-s-cls`, `lvvit-m-cls`); speed and MACs do not depend on the weights. STAR's static "
        "schedule at Table 1's rho, keep rates from the ACS profile (l/(L−1))^gamma fitted to the paper's rows "
        "([paper_tables.md](paper_tables.md)), tokens ranked by [CLS] attention. MACs per image at 3x224x224, "
        f"*full* convention ({CONVENTIONS['full']}).",
        "",
        (f"{env['device_name']} ({env['device']}), {env['dtype']}, batch {env['batch_size']}, {env['threads']} "
         f"threads, torch {env['torch']}; {rows[0]['pairs']} alternating pairs after {rows[0]['a']['warmup']} warm-up "
         f"pairs; {report['date']}."),
        "",
        "| model | method | GMACs dense → pruned (paper) | dense ms/batch | pruned ms/batch | speedup, median [IQR] "
        "| MAC ratio (full) | speedup / MAC ratio |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} | {r['method']} rho {r['rho']} | {r['before']['macs_full'] / 1e9:.2f} → "
            f"{r['after']['macs_full'] / 1e9:.2f} ({r['paper_gflops']}) | {r['b']['median_ms']:.1f} | "
            f"{r['a']['median_ms']:.1f} | {r['speedup']:.3f} [{r['speedup_q1']:.3f}-{r['speedup_q3']:.3f}] | "
            f"{r['mac_ratio_full']:.3f} | {r['speedup_over_mac_ratio']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Time every configuration and write the results."""
    args = parse_args(argv)
    start = time.perf_counter()
    rows = [measure(*config, args) for config in CONFIGS]
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "seconds": time.perf_counter() - start, "rows": rows}
    write_results(args.out_dir, results_stem("families_speed", args.device, args.dtype), report,
                  to_markdown(report))


if __name__ == "__main__":
    main()
