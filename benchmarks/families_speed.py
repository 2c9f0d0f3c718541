"""Families beyond DeiT at the papers' configurations: paired speedup against dense next to the MAC ratio.

Issue 25's families enter here as they land:

- LV-ViT under STAR's Table 1 settings: LV-ViT-S at rho 0.65 and LV-ViT-M at rho 0.8, with the class head alone as
  STAR's code runs them (``lvvit-s-cls``, ``lvvit-m-cls``), keep rates from the ACS profile fitted to the paper's
  rows (``star_deit.ACS_GAMMA``), tokens ranked by [CLS] attention;
- ConvNeXt-T/S/B and Swin-T/S/B at VBP's rates of 45/50/55% (the paper's speed table, notes/vbp.md Table 12). VBP's
  global ranking of trained variances decides which blocks lose how many; without the weights every block loses the
  same share;
- Swin-S and Swin-B under HetDPT's Table 1 rows: the per-stage split of attention and GELU removals closest to the
  printed params and MACs (``stage_splits.closest_hetdpt_split``; the paper does not print its layer sets).

Weights are random: speed and MACs do not depend on them, and nothing is downloaded.

Writes ``<out-dir>/families_speed_<device>.json`` and ``.md``.

    python benchmarks/families_speed.py                 # CPU, fp32, batch 16; about 15 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import time
from pathlib import Path
from typing import Any

from profile_deit import DTYPES, results_stem, write_results
from star_deit import ACS_GAMMA, static_star
from stage_splits import SWIN, closest_hetdpt_split
from torch import nn

import vitprune
from vitprune.measure import CONVENTIONS, compare_speed, count_macs
from vitprune.surgery import prune_depth, prune_mlp_neurons

#: (label, model, method, setting, what the paper prints for it): the configurations timed. HetDPT's setting is the
#: Swin size whose printed row the split is fitted to.
CONFIGS = [
    ("LV-ViT-S", "lvvit-s-cls", "STAR", 0.65, "3.2 GFLOPs (Table 1)"),
    ("LV-ViT-M", "lvvit-m-cls", "STAR", 0.8, "6.7 GFLOPs (Table 1)"),
    ("ConvNeXt-T", "convnext_tiny", "VBP", 0.45, "1.28x H200, 1.30x CPU (Table 12)"),
    ("ConvNeXt-S", "convnext_small", "VBP", 0.5, "1.42x H200, 1.55x CPU (Table 12)"),
    ("ConvNeXt-B", "convnext_base", "VBP", 0.55, "1.49x H200, 1.71x CPU (Table 12)"),
    ("Swin-T", SWIN["T"], "VBP", 0.45, "1.20x H200, 1.18x CPU (Table 12)"),
    ("Swin-S", SWIN["S"], "VBP", 0.5, "1.27x H200, 1.30x CPU (Table 12)"),
    ("Swin-B", SWIN["B"], "VBP", 0.55, "1.30x H200, 1.31x CPU (Table 12)"),
    ("Swin-S", SWIN["S"], "HetDPT", "S", "1.23x throughput, GPU (HetDPT Table 1)"),
    ("Swin-B", SWIN["B"], "HetDPT", "B", "1.60x throughput, GPU (HetDPT Table 1)"),
]


def _pruned(dense: nn.Module, label: str, method: str, setting: Any) -> tuple[nn.Module, dict[str, Any]]:
    """A pruned copy of ``dense`` and what was cut, described: STAR's static schedule at rho ``setting``, HetDPT's
    split closest to the printed Swin-``setting`` row, or the share ``setting`` of every block's MLP neurons (VBP's
    rate, spread evenly)."""
    if method == "STAR":
        pruned, rates = static_star(dense, ACS_GAMMA[label], setting)
        return pruned, {"keep_rates": rates, "gamma": ACS_GAMMA[label], "described": f"STAR rho {setting}"}
    pruned = copy.deepcopy(dense)
    if method == "HetDPT":
        split, stage_list = closest_hetdpt_split(dense, setting)
        attention, activation = split.blocks(stage_list)
        prune_depth(pruned, attention, activation)
        return pruned, {"attention": attention, "activation": activation,
                        "described": f"HetDPT {split.layers} layers: {split.describe()}"}
    widths = []
    for view in vitprune.get_adapter(pruned).blocks():
        kept = view.mlp.hidden_features - math.ceil(setting * view.mlp.hidden_features)
        prune_mlp_neurons(pruned, view.index, list(range(kept)))
        widths.append(kept)
    return pruned, {"mlp_widths": widths, "described": f"VBP {setting:.0%} (every block)"}


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


def measure(label: str, name: str, method: str, setting: Any, paper: str, args: argparse.Namespace) -> dict[str, Any]:
    """One configuration: its MACs before and after, and the pruned model timed against the dense one."""
    dense = vitprune.create_model(name)
    pruned, cut = _pruned(dense, label, method, setting)
    before, after = count_macs(dense).totals(), count_macs(pruned).totals()
    mac_ratio = before["macs_full"] / after["macs_full"]
    comparison = compare_speed(pruned, dense, batch_size=args.batch_size, device=args.device,
                               dtype=DTYPES[args.dtype], warmup=args.warmup, pairs=args.pairs,
                               progress=sys.stderr.isatty())
    print(f"{label} {cut['described']}: {comparison}; MAC ratio {mac_ratio:.3f}", flush=True)
    return {"label": label, "model": name, "method": method, "setting": setting, **cut, "paper": paper,
            "before": before, "after": after, "mac_ratio_full": mac_ratio,
            "speedup_over_mac_ratio": comparison.speedup / mac_ratio, **comparison.to_dict()}


def to_markdown(report: dict[str, Any]) -> str:
    """The table with its context."""
    rows = report["rows"]
    env = rows[0]["a"]["context"]
    lines = [
        "# Families beyond DeiT: measured speedup against the MAC ratio",
        "",
        "Starting checkpoints, all with random weights (speed and MACs do not depend on them): vitprune's LV-ViT-S and "
        "LV-ViT-M, class head alone as STAR's code runs them (`lvvit-s-cls`, `lvvit-m-cls`), under STAR's static "
        "schedule at Table 1's rho, keep rates from the ACS profile (l/(L−1))^gamma fitted to the paper's rows "
        "([paper_tables.md](paper_tables.md)), tokens ranked by [CLS] attention; timm's ConvNeXt-T/S/B and "
        "Swin-T/S/B with VBP's rates of the paper's speed table, the same share of every block's MLP neurons removed "
        "(VBP's global ranking of trained variances would spread it unevenly); timm's Swin-S/B with HetDPT's "
        "attention and GELU removals split over the stages as closest to Table 1's printed params and MACs (the "
        "layer sets are not printed; per stage, each stage's last blocks). MACs per image at 3x224x224, "
        f"*full* convention ({CONVENTIONS['full']}).",
        "",
        (f"{env['device_name']} ({env['device']}), {env['dtype']}, batch {env['batch_size']}, {env['threads']} "
         f"threads, torch {env['torch']}; {rows[0]['pairs']} alternating pairs after {rows[0]['a']['warmup']} warm-up "
         f"pairs; {report['date']}."),
        "",
        "| model | method | GMACs dense → pruned | dense ms/batch | pruned ms/batch | speedup, median [IQR] "
        "| MAC ratio (full) | speedup / MAC ratio | paper |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} | {r['described']} | {r['before']['macs_full'] / 1e9:.2f} → "
            f"{r['after']['macs_full'] / 1e9:.2f} | {r['b']['median_ms']:.1f} | {r['a']['median_ms']:.1f} | "
            f"{r['speedup']:.3f} [{r['speedup_q1']:.3f}-{r['speedup_q3']:.3f}] | {r['mac_ratio_full']:.3f} | "
            f"{r['speedup_over_mac_ratio']:.3f} | {r['paper']} |")
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
