"""Depth, width and token pruning of DeiT-B and DeiT-S at matched MACs: paired CPU speedups against the MAC ratios.

The HetDPT paper's claim is that removing depth converts MACs into speed better than removing width or
tokens. This script prunes each model four ways to the same cost and times each against the dense model:

* the target T is the full-convention MACs of the paper's depth configuration (DeiT-B, 10 layers:
  attention [0,3,7,8,11] + GELU [2,7,8,10,11]; DeiT-S, 8 layers: attention [1,7,10,11] + GELU
  [7,8,10,11]; ``depth_speed.CONFIGS``);
* ``depth``: that configuration, with ``vitprune.surgery.prune_depth``;
* ``width``: ``prune_width_to_macs`` to T (torch-pruning, isomorphic, magnitude importance: embedding
  channels, head dims and FFN neurons at one global ratio found by bisection);
* ``depth+width``: half the depth budget, then ``prune_width_to_macs`` to T;
* ``width x8`` and ``depth+width x8``: the same with ``round_to=8``, every kept width a multiple of 8
  (widths such as 317 or 47 run far slower per MAC on CPU);
* ``depth+STAR``: the same half depth budget, then static STAR token pruning (alpha = 1: the blocks'
  own [CLS] attention, no LRP prior) at one keep rate in every block from ``--star-from`` on that still
  has its attention (a block without attention cannot score tokens), rates compounding from block to
  block; the rate is the largest, found by bisection, whose MACs (counted at each block's real token
  count) are at most T. With random weights an ACS schedule would mean nothing, hence one rate.

Half the depth budget is the first half of each of the paper's lists, rounded up for attention and down
for GELU (DeiT-B: attention [0,3,7] + GELU [2,7]; DeiT-S: attention [1,7] + GELU [7,8]); the table gives
the share of the MAC reduction it makes. Weights are random (``vitprune.create_model``; speed and MACs do
not depend on them, nothing is downloaded). Each variant is saved and timed against the dense timm model
in ``--processes`` fresh processes (``vitprune bench VARIANT --vs DENSE``, alternating pairs; see
``fresh_speed.py``), variants taking turns so that drift reaches all of them; the table shows the median
over processes and their range. Writes ``<out-dir>/composition_<device>.json`` and ``.md``.

    python benchmarks/composition_speed.py                       # CPU, fp32, batch 16, 10 pairs x 3 processes
    python benchmarks/composition_speed.py --models DeiT-S --pairs 3 --processes 1   # a quick check
    python benchmarks/composition_speed.py --device cuda --batch-size 256
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from depth_speed import CONFIGS
from fresh_speed import bench_fresh, summarise
from profile_deit import DTYPES, results_stem, write_results
from torch import nn

import vitprune
from vitprune.adapters import get_adapter
from vitprune.errors import VitpruneError
from vitprune.measure import CONVENTIONS, MacTarget, count_macs
from vitprune.methods.star import apply_keep_rates
from vitprune.methods.width import prune_width_to_macs
from vitprune.surgery import prune_depth

#: ``--models`` names (short or timm) -> the ``depth_speed.CONFIGS`` label.
MODELS = {key: label for label, (timm_name, *_) in CONFIGS.items() for key in (label.split(",")[0], timm_name)}
VARIANTS = ("depth", "width", "width x8", "depth+width", "depth+width x8", "depth+STAR")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["DeiT-B", "DeiT-S"], choices=list(MODELS))
    parser.add_argument("--device", default="cpu", help="'cpu' or 'cuda' (default: cpu)")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=10, help="alternating timed pairs per process (at least 3)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed pairs first, per process")
    parser.add_argument("--processes", type=int, default=3,
                        help="fresh processes per variant: on the 2-core machine a speedup moves by up to ±20%% "
                             "from one process to the next")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--star-from", type=int, default=3, help="first block (0-based) that may prune tokens")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)
    args.models = list(dict.fromkeys(MODELS[m] for m in args.models))
    if args.pairs < 3 or args.processes < 1:
        parser.error("--pairs must be at least 3 and --processes at least 1")
    return args


def _half(layers: list[int], up: bool) -> list[int]:
    """The first half of a layer list, rounded up or down."""
    return layers[:math.ceil(len(layers) / 2) if up else len(layers) // 2]


def _structure(model: nn.Module) -> dict[str, Any]:
    """Params, MACs in both conventions, and per block what is left (tokens, heads, widths)."""
    report = count_macs(model)
    adapter = get_adapter(model)
    blocks = [{"tokens": b.tokens, "heads": b.heads, "attn_dim": None if v.attn is None else v.attn.attn_dim,
               "mlp_hidden": b.mlp_hidden} for b, v in zip(report.blocks, adapter.blocks(), strict=True)]
    return {**report.totals(), "embed_dim": adapter.embed_dim, "blocks": blocks}


def _star(model: nn.Module, target: float, start: int, tol: float = 1e-4) -> tuple[float, list[int]]:
    """Token pruning at the largest single keep rate whose MACs are at most ``target``; in place.

    Returns the rate and the blocks that prune. MACs do not decrease as the rate grows (each block
    keeps ``ceil(rate · n)`` tokens), so bisection finds it.
    """
    views = get_adapter(model).blocks()
    blocks = [v.index for v in views if v.index >= start and v.attn is not None]

    def rates(rate: float) -> list[float]:
        return [rate if i in blocks else 1.0 for i in range(len(views))]

    def macs(rate: float) -> int:
        scratch = copy.deepcopy(model)
        apply_keep_rates(scratch, rates(rate), alpha=1.0)
        return count_macs(scratch).macs

    low, high = tol, 1.0
    if macs(low) > target:
        raise VitpruneError(f"token pruning from block {start} cannot reach {target / 1e9:.3f} GMACs: keeping one "
                            f"patch token costs {macs(low) / 1e9:.3f} G")
    while high - low > tol:
        mid = (low + high) / 2
        low, high = (mid, high) if macs(mid) <= target else (low, mid)
    apply_keep_rates(model, rates(low), alpha=1.0)
    return low, blocks


def _saved_dir(directory: Path, variant: str) -> Path:
    return directory / variant.replace("+", "_").replace(" ", "_")


def build(label: str, args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    """The dense model's figures and each variant, pruned to the depth configuration's MACs and saved."""
    name, attention, activation, _ = CONFIGS[label]
    dense = vitprune.create_model(name)
    half = {"attention": _half(attention, up=True), "activation": _half(activation, up=False)}
    row: dict[str, Any] = {"model": label, "timm_name": name, "dense": _structure(dense),
                           "depth_config": {"attention": attention, "activation": activation},
                           "half_depth_config": half, "variants": {}}
    dense_macs = row["dense"]["macs_full"]
    depth = copy.deepcopy(dense)
    prune_depth(depth, attention, activation)
    row["target_macs_full"] = target = count_macs(depth).macs
    for variant in VARIANTS:
        start = time.perf_counter()
        model = depth if variant == "depth" else copy.deepcopy(dense)
        info: dict[str, Any] = {}
        try:
            if variant != "depth":
                if variant.startswith("depth+"):
                    prune_depth(model, **half)
                    info["depth_share_of_reduction"] = (dense_macs - count_macs(model).macs) / (dense_macs - target)
                if "width" in variant:
                    round_to = 8 if variant.endswith("x8") else None
                    ratio, plan = prune_width_to_macs(model, MacTarget.absolute(target), round_to=round_to)
                    info |= {"width_ratio": ratio, "round_to": round_to, "width_plan_kept": {
                        "embed": None if plan.embed is None else len(plan.embed),
                        "head_dims": {b: len(k) for b, k in plan.head_dims.items()},
                        "heads": {b: len(k) for b, k in plan.heads.items()},
                        "neurons": {b: len(k) for b, k in plan.neurons.items()}}}
                elif variant == "depth+STAR":
                    rate, blocks = _star(model, target, args.star_from)
                    info |= {"keep_rate": rate, "token_blocks": blocks, "alpha": 1.0, "adaptive": False}
        except (VitpruneError, ValueError) as exc:
            # Reported as the library said it, not worked around: the row shows the message.
            row["variants"][variant] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"{label} {variant}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            continue
        figures = _structure(model)
        vitprune.save(model, _saved_dir(directory, variant))
        row["variants"][variant] = {
            **info, **figures, "build_seconds": time.perf_counter() - start,
            "macs_vs_target": figures["macs_full"] / target,
            "mac_ratio_full": dense_macs / figures["macs_full"],
            "mac_ratio_linear": row["dense"]["macs_linear"] / figures["macs_linear"],
            "recipe_edits": len(vitprune.get_recipe(model).edits), "runs": []}
        print(f"{label} {variant}: {figures['macs_full'] / 1e9:.3f} GMACs full ({figures['macs_full'] / target:.4f} "
              f"of target), {figures['params'] / 1e6:.2f} M params "
              f"{ {k: v for k, v in info.items() if k != 'width_plan_kept'} }", flush=True)
    return row


def time_variants(row: dict[str, Any], args: argparse.Namespace, directory: Path) -> None:
    """Every variant against the dense model in fresh processes, the variants taking turns; then the summary."""
    timed = [v for v in VARIANTS if "error" not in row["variants"][v]]
    for process in range(args.processes):
        for variant in timed:
            run = bench_fresh(str(_saved_dir(directory, variant)), row["timm_name"],
                              batch_size=args.batch_size, pairs=args.pairs, warmup=args.warmup, device=args.device,
                              dtype=args.dtype, threads=args.threads)
            row["variants"][variant]["runs"].append(run)
            print(f"{row['model']} {variant}, process {process + 1}/{args.processes}: speedup {run['speedup']:.3f} "
                  f"[IQR {run['speedup_q1']:.3f}-{run['speedup_q3']:.3f}], dense {run['b']['median_ms']:.1f} ms, "
                  f"pruned {run['a']['median_ms']:.1f} ms", flush=True)
    for variant in timed:
        v = row["variants"][variant]
        v["speedup"] = summarise([r["speedup"] for r in v["runs"]])
        v["speedup_over_mac_ratio"] = v["speedup"]["median"] / v["mac_ratio_full"]
        v["dense_ms"] = summarise([r["b"]["median_ms"] for r in v["runs"]])["median"]
        v["pruned_ms"] = summarise([r["a"]["median_ms"] for r in v["runs"]])["median"]
        v["other_load_max"] = max((x for r in v["runs"] for x in (r["a"]["other_load"], r["b"]["other_load"])
                                   if x is not None), default=None)


def _g(n: int) -> str:
    return f"{n / 1e9:.3f}"


def _load(run: dict[str, Any]) -> str:
    """``; load x%``: the CPU share other processes used during one timed process, where known."""
    loads = [x for x in (run["a"]["other_load"], run["b"]["other_load"]) if x is not None]
    return f"; load {max(loads):.0%}" if loads else ""


def _describe(variant: str, v: dict[str, Any], row: dict[str, Any]) -> str:
    """What a variant removed, in a few words."""
    depth, half = row["depth_config"], row["half_depth_config"]
    parts = []
    if variant == "depth":
        parts.append(f"attn {depth['attention']}, GELU {depth['activation']}")
    elif variant.startswith("depth+"):
        parts.append(f"attn {half['attention']}, GELU {half['activation']} ({v['depth_share_of_reduction']:.0%} "
                     "of the MAC cut)")
    if "width_ratio" in v:
        # Counted because on CPU a matmul over a width that is not a multiple of 8 can run much slower per MAC.
        widths = [v["embed_dim"]] + [w for b in v["blocks"] for w in (
            b["mlp_hidden"], None if b["attn_dim"] is None or not b["heads"] else b["attn_dim"] // b["heads"])
            if w is not None]
        odd = sum(w % 8 != 0 for w in widths)
        rounded = f", widths rounded to multiples of {v['round_to']}" if v.get("round_to") else ""
        parts.append(f"width ratio {v['width_ratio']:.4f}{rounded} (embed {v['embed_dim']}; {odd} of {len(widths)} "
                     "embed, head-dim and FFN widths not a multiple of 8)")
    if "keep_rate" in v:
        parts.append(f"keep rate {v['keep_rate']:.4f} in blocks {v['token_blocks']} (tokens entering each block: "
                     f"{' '.join(str(b['tokens']) for b in v['blocks'])})")
    return "; ".join(parts)


def to_markdown(report: dict[str, Any]) -> str:
    """The table with its conventions, context and starting checkpoints."""
    env, speed = report["environment"], report["speed"]
    lines = [
        "# Depth, width and token pruning of DeiT at matched MACs: measured speedup",
        "",
        "Starting checkpoints: timm's `deit_base_patch16_224` and `deit_small_patch16_224` with random weights",
        "(`vitprune.create_model`; structure only: speed and MACs do not depend on the weights). Target: the",
        "full-convention MACs of the HetDPT paper's depth configuration. *depth*: that configuration (`prune_depth`,",
        "attention identity x + LN1(x)); *width*: torch-pruning isomorphic width pruning, magnitude importance",
        "(`prune_width_to_macs`); *depth+width*: the first half of each depth list (attention rounded up, GELU down),",
        "then width to the target; *x8*: torch-pruning's `round_to=8`, every kept width a multiple of 8;",
        "*depth+STAR*: the same half depth, then static STAR (α = 1, own [CLS] attention)",
        f"at one keep rate, compounding, in every block from block {report['star_from']} on that keeps its attention,",
        "the largest rate within the target (random weights make an ACS schedule meaningless).",
        "",
        f"MACs per image at 3x224x224: *full* = {CONVENTIONS['full']} (the matched convention); *linear* =",
        f"{CONVENTIONS['linear']}. MAC ratio = dense / variant.",
        "",
        (f"Speed: {env['device_name']} ({env['device']}), {env['dtype']}, batch {speed['batch_size']}, "
         f"{env['threads']} threads, torch {env['torch']}, timm {env['timm']}, vitprune {env['vitprune']}. Each "
         f"variant against the dense model in {speed['processes']} fresh processes (`vitprune bench VARIANT --vs "
         f"DENSE`), each the median of {speed['pairs']} alternating pairs after {speed['warmup']} warm-up pairs; "
         "variants took turns. Speedup = dense time / variant time: median over processes [lowest-highest]; "
         "per process: median (IQR over pairs; CPU share used by other processes). Speedup / MAC ratio uses the "
         f"full MAC ratio: 1 means the variant turned its MAC cut into exactly as much speed. {report['date']}."),
        "",
        "| Model | Variant | What is removed | Params (M) | GMACs full | GMACs linear | MACs / target | "
        "MAC ratio full | MAC ratio linear | Dense ms/batch | Variant ms/batch | Speedup [range] | "
        "Speedup / MAC ratio | Per process | Other CPU load (max) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for row in report["results"]:
        d = row["dense"]
        lines.append(f"| {row['model'].split(',')[0]} | dense | - | {d['params'] / 1e6:.2f} | {_g(d['macs_full'])} | "
                     f"{_g(d['macs_linear'])} | {d['macs_full'] / row['target_macs_full']:.3f} | 1 | 1 | | | | | | |")
        for variant in VARIANTS:
            v = row["variants"][variant]
            if "error" in v:
                lines.append(f"| | {variant} | failed: {v['error']} | | | | | | | | | | | | |")
                continue
            s = v.get("speedup")
            timing = "| | | | | |"
            if s is not None:
                per = ", ".join(f"{r['speedup']:.3f} ({r['speedup_q1']:.3f}-{r['speedup_q3']:.3f}{_load(r)})"
                                for r in v["runs"])
                load = "-" if v["other_load_max"] is None else f"{v['other_load_max']:.1%}"
                timing = (f"{v['dense_ms']:.1f} | {v['pruned_ms']:.1f} | {s['median']:.3f} [{s['min']:.3f}-"
                          f"{s['max']:.3f}] | {v['speedup_over_mac_ratio']:.3f} | {per} | {load} |")
            lines.append(f"| | {variant} | {_describe(variant, v, row)} | {v['params'] / 1e6:.2f} | "
                         f"{_g(v['macs_full'])} | {_g(v['macs_linear'])} | {v['macs_vs_target']:.4f} | "
                         f"{v['mac_ratio_full']:.3f} | {v['mac_ratio_linear']:.3f} | {timing}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Build the variants, time them in fresh processes, write the JSON and Markdown results."""
    args = parse_args(argv)
    torch.manual_seed(0)
    results = []
    for label in args.models:
        # The saves are only a way into the fresh processes (random weights): gone once timed.
        with tempfile.TemporaryDirectory(prefix="composition_speed_") as tmp:
            row = build(label, args, Path(tmp))
            time_variants(row, args, Path(tmp))
        results.append(row)
    runs = [r for row in results for v in row["variants"].values() for r in v.get("runs", [])]
    if not runs:
        raise SystemExit("no variant could be built, so nothing was timed")
    env = runs[0]["a"]["context"]
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "checkpoints": {row["model"]: f"timm {row['timm_name']}, random weights (structure only)" for row in results},
        "environment": {k: v for k, v in env.items() if k != "batch_size"},
        "speed": {"batch_size": args.batch_size, "pairs": args.pairs, "warmup": args.warmup,
                  "processes": args.processes, "threads": args.threads, "device": args.device, "dtype": args.dtype,
                  "process": "fresh, per run (vitprune bench VARIANT --vs DENSE); variants take turns"},
        "conventions": CONVENTIONS, "matched_convention": "full", "star_from": args.star_from,
        "results": results,
    }
    write_results(args.out_dir, results_stem("composition", args.device, args.dtype), report, to_markdown(report))


if __name__ == "__main__":
    main()
