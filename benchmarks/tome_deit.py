"""ToMe on DeiT: the r behind HetDPT's Table 8 rows, their MACs in each convention, and measured speedups.

1. For DeiT-S and DeiT-B, the MACs of ToMe at constant r = 5..10 in the full convention (attention matmuls and the
   matching included, what FlopCounterMode counts) and the linear one (linear layers only), and which r comes
   nearest Table 8's 3.3 and 13.2 GMACs in each (implementation note §2: r = 7 in the linear convention, which is
   what torch-pruning's counter gives a ToMe model, since it skips the merged attention's matmuls).
2. Paired speedups of ToMe at that r against the dense model (alternating pairs, median and IQR), next to the MAC
   ratios and Table 8's measured 1.22x (DeiT-S) and 1.28x (DeiT-B, H800, batch 256).

Weights are random: structure and speed do not depend on them, and no ImageNet accuracy is measured here (Table 8's
80.6 / 79.5% need the trained checkpoints and ImageNet). Nothing is downloaded. Writes
``<out-dir>/tome_deit_<device>.json`` and ``.md``.

    python benchmarks/tome_deit.py                  # CPU, fp32, batch 16; about 6 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path
from typing import Any

from profile_deit import DTYPES, results_stem, write_results

import vitprune
from vitprune.measure import CONVENTIONS, compare_speed, count_macs
from vitprune.methods.tome import apply_merging

#: HetDPT Table 8: timm name, dense GMACs, ToMe's GMACs, its measured speedup, its top-1 (dense -> ToMe).
TABLE8 = {"DeiT-S": ("deit_small_patch16_224", 4.6, 3.3, 1.22, "79.8 -> 79.5"),
          "DeiT-B": ("deit_base_patch16_224", 17.6, 13.2, 1.28, "81.8 -> 80.6")}
RS = range(5, 11)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--models", nargs="+", default=list(TABLE8), choices=list(TABLE8))
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    return parser.parse_args(argv)


def merged(model: Any, r: int) -> Any:
    """A copy of ``model`` merging ``r`` tokens in every block (proportional attention)."""
    tome = copy.deepcopy(model)
    apply_merging(tome, [r] * len(vitprune.get_adapter(tome).blocks()))
    return tome


def row(label: str, args: argparse.Namespace) -> dict[str, Any]:
    """One model's MACs per r, the r nearest Table 8 in each convention and the paired speedup at the linear one."""
    name, dense_paper, tome_paper, speedup_paper, top1_paper = TABLE8[label]
    dense = vitprune.create_model(name)
    totals = {"dense": count_macs(dense).totals(), **{r: count_macs(merged(dense, r)).totals() for r in RS}}
    nearest = {conv: min(RS, key=lambda r: abs(totals[r][f"macs_{conv}"] / 1e9 - tome_paper))
               for conv in ("full", "linear")}
    r = nearest["linear"]
    tome = merged(dense, r)
    comparison = compare_speed(tome, dense, batch_size=args.batch_size, device=args.device, dtype=DTYPES[args.dtype],
                               warmup=args.warmup, pairs=args.pairs, progress=sys.stderr.isatty())
    print(f"{label} r {r}: {comparison}", flush=True)
    return {"timm_name": name, "paper": {"dense_gmacs": dense_paper, "tome_gmacs": tome_paper,
                                         "speedup": speedup_paper, "top1": top1_paper},
            "gmacs": {str(k): {c: v[f"macs_{c}"] / 1e9 for c in ("full", "linear")} for k, v in totals.items()},
            "nearest_r": nearest, "r": r,
            "mac_ratio": {c: totals["dense"][f"macs_{c}"] / totals[r][f"macs_{c}"] for c in ("full", "linear")},
            **comparison.to_dict()}


def to_markdown(report: dict[str, Any]) -> str:
    """The MAC table and the speed table with their context."""
    rows = report["rows"]
    env = next(iter(rows.values()))["a"]["context"]
    lines = [
        "# ToMe on DeiT: the r behind HetDPT's Table 8, MACs and measured speedup",
        "",
        "Starting checkpoints: timm's DeiT-S and DeiT-B architectures with random weights (structure and speed do not",
        "depend on them; no accuracy is measured). GMACs per image at 3x224x224: *full* "
        f"({CONVENTIONS['full']}; with ToMe's matching), *linear* ({CONVENTIONS['linear']}).",
        "",
        "## GMACs per r (constant schedule, proportional attention)",
        "",
        "| r | " + " | ".join(f"{label} full | {label} linear" for label in rows) + " |",
        "|---:|" + "---:|---:|" * len(rows),
    ]
    for r in ["dense", *map(str, RS)]:
        cells = [f"{rows[label]['gmacs'][r]['full']:.3f} | {rows[label]['gmacs'][r]['linear']:.3f}" for label in rows]
        lines.append(f"| {r} | " + " | ".join(cells) + " |")
    lines += ["", "Table 8 prints " + ", ".join(f"{label} {d['paper']['tome_gmacs']} G" for label, d in rows.items())
              + ". Nearest r: " + "; ".join(f"{label} full {d['nearest_r']['full']}, linear {d['nearest_r']['linear']}"
                                            for label, d in rows.items()) + ".", ""]
    lines += [
        "## Measured speedup at the linear convention's r",
        "",
        (f"{env['device_name']} ({env['device']}), {env['dtype']}, batch {env['batch_size']}, {env['threads']} "
         f"threads, torch {env['torch']}; alternating pairs; {report['date']}. Table 8's speedups are H800, batch "
         "256."),
        "",
        "| Model | r | Dense ms/batch | ToMe ms/batch | Speedup, median [IQR] | MAC ratio full / linear | Table 8 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, d in rows.items():
        lines.append(f"| {label} | {d['r']} | {d['b']['median_ms']:.1f} | {d['a']['median_ms']:.1f} | "
                     f"{d['speedup']:.3f} [{d['speedup_q1']:.3f}-{d['speedup_q3']:.3f}] | "
                     f"{d['mac_ratio']['full']:.3f} / {d['mac_ratio']['linear']:.3f} | {d['paper']['speedup']}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Count, time and write the results."""
    args = parse_args(argv)
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "rows": {label: row(label, args) for label in args.models}}
    write_results(args.out_dir, results_stem("tome_deit", args.device, args.dtype), report, to_markdown(report))


if __name__ == "__main__":
    main()
