"""STAR's CPU speedup against its MAC ratio, and where the rest of the time goes: the token-selection overhead.

For each model, static STAR at rho = 0.7 (keep rates from the ACS profile :data:`star_deit.ACS_GAMMA` fits to
the paper's DeiT GFLOPs; 0.56, DeiT-S's, for models the paper has no profile for), tokens ranked by [CLS]
attention, timed against the dense model in alternating pairs (``vitprune.measure.compare_speed``). The
profile splits the pruned forward's CPU time into the operators the token selection adds (the [CLS] row, scores,
top-k, sort, gathers, concatenations) and the rest. Weights are random: speed does not depend on them.

``--label`` names the run (e.g. ``before`` and ``after`` a change to the selection); the results file keeps
every label's rows, so the page shows them side by side.

    python benchmarks/star_overhead.py --label after                 # about 5 minutes on 2 CPU cores
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import torch
from profile_deit import write_results
from star_deit import ACS_GAMMA, static_star
from torch.profiler import ProfilerActivity, profile

import vitprune
from vitprune.measure import compare_speed, count_macs

#: label -> (vitprune/timm model name, batch size, constructor kwargs): batches that keep a pair to about a second
#: on one core. ``cluttered-mnist-vit``'s shapes as timm kwargs, so that code from before that model can run it.
MODELS = {"digits-vit": ("digits-vit", 64, {}),
          "cluttered-mnist-vit": ("vit_tiny_patch16_224", 32, {"img_size": 40, "patch_size": 5, "in_chans": 1,
                                                               "num_classes": 10, "embed_dim": 128, "depth": 8,
                                                               "num_heads": 4}),
          "DeiT-S": ("deit_small_patch16_224", 8, {}), "DeiT-B": ("deit_base_patch16_224", 4, {})}
RHO = 0.7
#: Operators of the token selection (what a dense forward does not run), by their aten names.
SELECTION_OPS = ("aten::topk", "aten::sort", "aten::gather", "aten::index_select", "aten::cat", "aten::index",
                 "aten::bmm", "aten::softmax", "aten::_softmax", "aten::mean", "aten::log", "aten::clamp_min",
                 "aten::sum", "aten::mul", "aten::arange", "aten::masked_fill")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="current", help="name of this run's rows (e.g. before, after)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), help=f"of: {', '.join(MODELS)}, or "
                                                                         "label=name:batch")
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    return parser.parse_args(argv)


def _model(spec: str) -> tuple[str, str, int, dict[str, Any]]:
    if "=" in spec:
        label, rest = spec.split("=", 1)
        name, batch = rest.rsplit(":", 1)
        return label, name, int(batch), {}
    return spec, *MODELS[spec]


def _selection_share(model: torch.nn.Module, x: torch.Tensor) -> dict[str, float]:
    """The pruned forward's CPU time (profiled) on the selection's operators, per operator and in all."""
    with torch.inference_mode():
        model(x)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                model(x)
    times = {e.key: e.self_cpu_time_total for e in prof.key_averages()}
    total = sum(times.values())
    ops = {k: v / total for k, v in times.items() if k in SELECTION_OPS and v / total >= 0.002}
    return {"total": sum(times[k] for k in SELECTION_OPS if k in times) / total,
            "ops": dict(sorted(ops.items(), key=lambda kv: -kv[1]))}


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per model."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    rows = []
    for spec in args.models:
        label, name, batch, kwargs = _model(spec)
        torch.manual_seed(0)
        dense = vitprune.create_model(name, **kwargs).eval()
        pruned, rates = static_star(dense, ACS_GAMMA.get(label, ACS_GAMMA["DeiT-S"]), RHO)
        pruned.eval()
        mac_ratio = count_macs(dense).macs / count_macs(pruned).macs
        cmp = compare_speed(pruned, dense, batch_size=batch, pairs=args.pairs, warmup=args.warmup,
                            threads=args.threads).to_dict()
        x = torch.randn(batch, *vitprune.get_adapter(dense).input_size)
        rows.append({"model": label, "name": name, "batch": batch, "keep_rates": [round(r, 4) for r in rates],
                     "mac_ratio": mac_ratio, "speedup": cmp["speedup"],
                     "speedup_iqr": [cmp["speedup_q1"], cmp["speedup_q3"]],
                     "ms_dense": cmp["b"]["median_ms"], "ms_pruned": cmp["a"]["median_ms"],
                     "speedup_over_mac_ratio": cmp["speedup"] / mac_ratio, "selection": _selection_share(pruned, x)})
        print(f"{label}: speedup {cmp['speedup']:.3f}, MAC ratio {mac_ratio:.3f}, "
              f"{cmp['speedup'] / mac_ratio:.3f} of it; selection {rows[-1]['selection']['total']:.1%}", flush=True)
    return rows


def to_markdown(report: dict[str, Any]) -> str:
    """One table of every label's rows, then each label's selection profile."""
    lines = ["# STAR on CPU: speedup against the MAC ratio, and the token-selection overhead", "",
             "Static STAR at rho = 0.7 (ACS-profile keep rates), tokens ranked by [CLS] attention, against the dense "
             "model with random weights (starting checkpoints: `digits-vit`, `cluttered-mnist-vit`'s shapes and timm's "
             "DeiT-S/B architectures; "
             "speed does not depend on the weights). MAC ratio in the full convention (attention matmuls "
             "included). Speedup: median over alternating pairs [IQR]. `selection`: the share of the pruned "
             "forward's profiled CPU time spent in the operators the token selection adds (top-k, sort, gathers, "
             "the [CLS] row, scores). Wall-clock ratios on a shared 2-core VM move by up to 0.15 between runs of "
             "the same code, more than the selection costs on the small models: the profiled share is the figure "
             "to compare across code versions.", "",
             "| run | model | batch | MAC ratio | speedup [IQR] | speedup / MAC ratio | selection share | machine |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for label, run in report["runs"].items():
        for row in run["rows"]:
            iqr = row["speedup_iqr"]
            spread = f" [{iqr[0]:.3f}-{iqr[1]:.3f}]"
            lines.append(f"| {label} | {row['model']} | {row['batch']} | {row['mac_ratio']:.3f} | "
                         f"{row['speedup']:.3f}{spread} | {row['speedup_over_mac_ratio']:.3f} | "
                         f"{row['selection']['total']:.1%} | {run['machine']} |")
    for label, run in report["runs"].items():
        lines += ["", f"## `{label}`: selection operators (share of the pruned forward)", "", run["note"], ""]
        for row in run["rows"]:
            ops = ", ".join(f"{k.removeprefix('aten::')} {v:.1%}" for k, v in row["selection"]["ops"].items())
            lines.append(f"- {row['model']}: {ops}")
    lines += ["", "Command: `python benchmarks/star_overhead.py --label LABEL`.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Measure, merge this label's rows into the results file, write the page."""
    args = parse_args(argv)
    path = args.out_dir / "star_overhead_cpu.json"
    report = json.loads(path.read_text()) if path.exists() else {"runs": {}}
    threads = args.threads or torch.get_num_threads()
    report["runs"][args.label] = {
        "rows": measure(args), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {threads} thread{'s' if threads > 1 else ''}, torch {torch.__version__}",
        "note": f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {args.pairs} pairs after {args.warmup} "
                f"warm-up runs."}
    write_results(args.out_dir, "star_overhead_cpu", report, to_markdown(report))


if __name__ == "__main__":
    main()
