"""Profile and time timm's DeiT-T/S/B (random weights) on this machine.

For each model: MACs in both conventions, parameters, batch-1 latency and throughput at
``--batch-size``, each with median and spread, plus the full measurement context. Writes
``<out-dir>/deit_<device>.json`` and ``<out-dir>/deit_<device>.md`` (``deit_<device>_<dtype>`` for
a dtype other than float32).

    python benchmarks/profile_deit.py                       # CPU, fp32, batch 32
    python benchmarks/profile_deit.py --device cuda --dtype bfloat16
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import timm
import torch

from vitprune.atomic import atomic_file, write_json
from vitprune.measure import CONVENTIONS, count_macs, measure_speed

MODELS = {
    "DeiT-T": "deit_tiny_patch16_224",
    "DeiT-S": "deit_small_patch16_224",
    "DeiT-B": "deit_base_patch16_224",
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="'cpu' or 'cuda' (default: cpu)")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--batch-size", type=int, default=None,
                        help="batch for the throughput run (default: 32 on CPU, 256 on CUDA)")
    parser.add_argument("--repeats", type=int, default=20, help="timed forward passes per measurement")
    parser.add_argument("--warmup", type=int, default=5, help="untimed forward passes before timing")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)
    if args.batch_size is None:
        args.batch_size = 256 if torch.device(args.device).type == "cuda" else 32
    return args


def profile(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """MACs, parameters, latency and throughput of one model."""
    model = timm.create_model(MODELS[name], pretrained=False).eval()
    macs = {c: count_macs(model, convention=c) for c in CONVENTIONS}
    timing = {"device": args.device, "dtype": DTYPES[args.dtype], "warmup": args.warmup, "repeats": args.repeats,
              "threads": args.threads, "progress": sys.stderr.isatty()}
    latency = measure_speed(model, batch_size=1, **timing)
    print(f"{name} latency:    {latency}", flush=True)
    throughput = measure_speed(model, batch_size=args.batch_size, **timing)
    print(f"{name} throughput: {throughput}", flush=True)
    return {
        "model": name,
        "timm_name": MODELS[name],
        "params": macs["full"].params,
        "macs_full": macs["full"].macs,
        "macs_linear": macs["linear"].macs,
        "input_size": list(macs["full"].input_size),
        "latency": latency.to_dict(),
        "throughput": throughput.to_dict(),
    }


def to_markdown(report: dict[str, Any]) -> str:
    """The results as a Markdown table with its context."""
    env = report["environment"]
    batch = report["batch_size"]
    lines = [
        f"# DeiT on {env['device_name']} ({env['device']}, {env['dtype']})",
        "",
        (f"Random weights, input 3x224x224. Measured {report['date']} with torch {env['torch']}, "
         f"timm {env['timm']}, vitprune {env['vitprune']}, {env['threads']} threads, Python {env['python']} "
         f"on {env['platform']}."),
        "",
        (f"MACs per image: *full* = {CONVENTIONS['full']}; *linear* = {CONVENTIONS['linear']}. "
         "Biases, norms, activations and softmax are not counted."),
        "",
        (f"Latency: median time of one batch-1 forward, with interquartile range and min-max over "
         f"{report['repeats']} runs. Throughput: batch {batch} / median batch time, in brackets the range "
         "from the third to the first quartile."),
        "",
        ("| Model | Params (M) | GMACs (full) | GMACs (linear) | Latency b1 (ms) | Latency IQR (ms) | "
         f"Latency min-max (ms) | Throughput b{batch} (img/s) |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        lat, thr = r["latency"], r["throughput"]
        per_sec = [batch / (thr[k] / 1e3) for k in ("q3_ms", "q1_ms")]
        lines.append(
            f"| {r['model']} | {r['params'] / 1e6:.2f} | {r['macs_full'] / 1e9:.3f} | {r['macs_linear'] / 1e9:.3f} | "
            f"{lat['median_ms']:.1f} | {lat['q1_ms']:.1f}-{lat['q3_ms']:.1f} | "
            f"{lat['min_ms']:.1f}-{lat['max_ms']:.1f} | "
            f"{thr['throughput']:.1f} [{per_sec[0]:.1f}-{per_sec[1]:.1f}] |"
        )
    loads = [r[k]["other_load"] for r in report["results"] for k in ("latency", "throughput")]
    if None not in loads:
        shares = ", ".join(f"{x:.1%}" for x in loads)
        lines += ["", ("Share of the machine's CPU used by other processes during each measurement (latency, "
                       f"throughput per model; above a few percent the figures are suspect): {shares}.")]
    return "\n".join(lines) + "\n"


def results_stem(name: str, device: str, dtype: str = "float32") -> str:
    """The file stem of a device-dependent result: ``name_<device type>``, plus ``_<dtype>`` unless fp32."""
    stem = f"{name}_{torch.device(device).type}"
    return stem if dtype == "float32" else f"{stem}_{dtype}"


def write_results(out_dir: Path, stem: str, report: dict[str, Any], markdown: str) -> None:
    """``<stem>.json`` and ``<stem>.md`` in ``out_dir``, each written so that it is never seen half-written."""
    write_json(out_dir / f"{stem}.json", report)
    with atomic_file(out_dir / f"{stem}.md") as tmp:
        tmp.write_text(markdown, encoding="utf-8")
    print(f"wrote {out_dir / stem}.json and .md")


def main(argv: list[str] | None = None) -> None:
    """Profile the chosen models and write the JSON and Markdown results."""
    args = parse_args(argv)
    results = [profile(name, args) for name in args.models]
    env = results[0]["latency"]["context"]
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "environment": {k: v for k, v in env.items() if k != "batch_size"},
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "results": results,
    }
    write_results(args.out_dir, results_stem("deit", args.device, args.dtype), report, to_markdown(report))


if __name__ == "__main__":
    main()
