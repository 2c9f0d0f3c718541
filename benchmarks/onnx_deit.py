"""ONNX deployment of pruned DeiT-S: outputs against PyTorch, and onnxruntime's speedup over the exported dense model.

Builds DeiT-S (timm, random weights: structure and speed do not depend on them; nothing is
downloaded), its HetDPT depth-pruned form (the paper's 8 layers: attention [1,7,10,11], GELU
[7,8,10,11]) and its VBP form (half of all FFN neurons, ranked globally by post-activation
variance and the removed means folded into fc2's bias, with the statistics taken on random
images: the structure is VBP's, the choice of neurons is not a trained model's). Each is exported
with :func:`vitprune.export.export_onnx` (checked against PyTorch on random images, dynamic
batch), then every model is timed against the dense one in alternating pairs, in onnxruntime
(dense ONNX file as the reference) and in PyTorch, with the MAC ratio beside the speedups.

    python benchmarks/onnx_deit.py                      # batch 16, 10 pairs, 2 threads
    python benchmarks/onnx_deit.py --pairs 3 --batch-size 4
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from depth_speed import CONFIGS
from profile_deit import write_results

import vitprune
from vitprune.export import OnnxRuntimeModel, export_onnx
from vitprune.measure import CONVENTIONS, compare_speed, count_macs
from vitprune.methods.vbp import mlp_statistics, neuron_scores, prune_by_selection, select_neurons
from vitprune.surgery import prune_depth

NAME = "deit_small_patch16_224"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=10, help="alternating timed pairs per comparison")
    parser.add_argument("--warmup", type=int, default=3, help="untimed pairs first")
    parser.add_argument("--threads", type=int, default=2, help="threads of both runtimes")
    parser.add_argument("--vbp-ratio", type=float, default=0.5, help="share of FFN neurons VBP removes")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    return parser.parse_args(argv)


def _random_images(size: tuple[int, int, int], n: int = 64) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(n, *size, generator=gen)
    return [(images[i:i + 16], torch.zeros(16, dtype=torch.long)) for i in range(0, n, 16)]


def models(vbp_ratio: float) -> dict[str, torch.nn.Module]:
    """Dense, depth-pruned and VBP-pruned DeiT-S with shared weights."""
    torch.manual_seed(0)
    dense = vitprune.create_model(NAME).eval()
    depth = copy.deepcopy(dense)
    _, attention, activation, _ = CONFIGS["DeiT-S, 8 layers"]
    prune_depth(depth, attention, activation)
    vbp = copy.deepcopy(dense)
    batches = _random_images(vitprune.get_adapter(dense).input_size)
    stats = mlp_statistics(vbp, batches)
    removed = select_neurons(neuron_scores(vbp, "variance", batches, stats=stats), vbp_ratio)
    prune_by_selection(vbp, removed, stats)
    return {"dense": dense, f"HetDPT depth (attention {attention}, GELU {activation})": depth,
            f"VBP ({vbp_ratio:.0%} of FFN neurons)": vbp}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Export, check and time every model."""
    nets = models(args.vbp_ratio)
    dense = nets["dense"]
    size = vitprune.get_adapter(dense).input_size
    timing = {"input_size": size, "batch_size": args.batch_size, "pairs": args.pairs, "warmup": args.warmup,
              "threads": args.threads, "progress": sys.stderr.isatty()}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        exports = {label: export_onnx(net, Path(tmp) / f"{i}.onnx") for i, (label, net) in enumerate(nets.items())}
        sessions = {label: OnnxRuntimeModel(e.path, threads=args.threads) for label, e in exports.items()}
        for label, net in nets.items():
            row = {"model": label, "export": exports[label].to_dict(), **count_macs(net).totals(),
                   "onnx_vs_pytorch": compare_speed(sessions[label], net, **timing).to_dict()}
            if label != "dense":
                row["mac_ratio_full"] = count_macs(dense).macs / row["macs_full"]
                row["onnxruntime"] = compare_speed(sessions[label], sessions["dense"], **timing).to_dict()
                row["pytorch"] = compare_speed(net, dense, **timing).to_dict()
            print(f"{label}: max diff {exports[label].max_abs_diff:.1e}" + (
                f", onnxruntime speedup {row['onnxruntime']['speedup']:.3f}, PyTorch {row['pytorch']['speedup']:.3f}, "
                f"MAC ratio {row['mac_ratio_full']:.3f}" if label != "dense" else ""), flush=True)
            rows.append(row)
    context = rows[0]["onnx_vs_pytorch"]["a"]["context"]
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "starting_checkpoint": f"timm {NAME}, random weights",
            "batch_size": args.batch_size, "pairs": args.pairs, "warmup": args.warmup, "threads": args.threads,
            "onnxruntime": exports["dense"].onnxruntime, "environment": context, "rows": rows}


def _speed(s: dict[str, Any]) -> str:
    return f"{s['speedup']:.3f} [{s['speedup_q1']:.3f}–{s['speedup_q3']:.3f}]"


def _load(row: dict[str, Any]) -> str:
    """The largest share of the CPU other processes used during any of the row's timings."""
    shares = [row[k]["a"]["other_load"] for k in ("onnx_vs_pytorch", "onnxruntime", "pytorch") if k in row]
    shares = [s for s in shares if s is not None]
    return f"{max(shares):.0%}" if shares else "-"


def to_markdown(report: dict[str, Any]) -> str:
    """The table with its context."""
    env = report["environment"]
    lines = [
        "# ONNX deployment of pruned DeiT-S",
        "",
        f"Starting checkpoint: {report['starting_checkpoint']} (structure and speed do not depend on the weights; "
        "VBP's neurons were chosen on random images). Exported with `vitprune.export.export_onnx` (torch dynamo "
        f"exporter, dynamic batch) and run by onnxruntime {report['onnxruntime']} on CPU.",
        "",
        f"{env['device_name']}, {env['dtype']}, batch {report['batch_size']}, {report['threads']} threads in both "
        f"runtimes, torch {env['torch']}; {report['pairs']} alternating pairs after {report['warmup']} warm-up pairs; "
        f"{report['date']}. Speedup = reference time / model time per pair: median [IQR]. MACs per image: full = "
        f"{CONVENTIONS['full']}.",
        "",
        "| Model | Params (M) | GMACs full | Max abs diff vs PyTorch | onnxruntime ms/batch | onnxruntime speedup "
        "vs dense ONNX | PyTorch speedup vs dense | MAC ratio | onnxruntime vs PyTorch (same model) | Other CPU load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        dense = r["model"] == "dense"
        lines.append(
            f"| {r['model']} | {r['params'] / 1e6:.2f} | {r['macs_full'] / 1e9:.3f} | "
            f"{r['export']['max_abs_diff']:.1e} | {r['onnx_vs_pytorch']['a']['median_ms']:.1f} | "
            f"{'1' if dense else _speed(r['onnxruntime'])} | {'1' if dense else _speed(r['pytorch'])} | "
            f"{'1' if dense else format(r['mac_ratio_full'], '.3f')} | {_speed(r['onnx_vs_pytorch'])} | "
            f"{_load(r)} |")
    lines += ["", "Other CPU load: the largest share of the machine's CPU that other processes used while the row was "
              "timed; above a few percent the row is suspect.", "",
              "Written by `benchmarks/onnx_deit.py`; the JSON next to this file has every pair's timings.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run and write ``onnx_deit_cpu.json`` and ``.md``."""
    args = parse_args(argv)
    report = run(args)
    write_results(args.out_dir, "onnx_deit_cpu", report, to_markdown(report))


if __name__ == "__main__":
    main()
