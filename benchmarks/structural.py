"""Every method and chain on timm's DeiT-T/S/B shapes: params, MACs in both conventions, paired speedup, one table.

Each benchmark script so far looks at one method, at its own settings, on its own models. This one puts
them side by side: for each DeiT it builds one physically smaller dense model per variant with vitprune's
surgery and methods APIs, counts it, and times it against the dense model in alternating pairs
(``vitprune.measure.compare_speed``, in this process), so that speedup and MAC ratio can be read across
methods in one table and one plot:

* ``depth``: the HetDPT paper's layer sets (``depth_speed.CONFIGS``: DeiT-B 10 layers, DeiT-S 8 layers;
  DeiT-T, for which the paper has none, gets DeiT-S's, both having 12 blocks), ``prune_depth``;
* ``width``: ``prune_width_to_macs`` (torch-pruning, isomorphic, magnitude importance, ``round_to=8``) to
  the depth variant's full-convention MACs, as ``composition_speed.py`` does;
* ``vbp``: half of every block's FFN neurons removed (``prune_mlp_neurons``), VBP's DeiT-S ratio;
* ``star``: static STAR at the paper's rho = 0.7, keep rates from the ACS profile the STAR note (§1.10)
  fits to the paper's GFLOPs, ``(l/(L-1))^gamma``, tokens ranked by the blocks' own [CLS] attention;
* ``hiap``: HiAP's described DeiT-S architecture (``hiap_deit.described_gates``), scaled to DeiT-T/B;
* ``hetdpt+``: the depth variant, then ``prune_width_to_macs`` (``round_to=8``) to half the dense model's
  full MACs (the HetDPT+ chain depth -> width).

Weights are random (speed and MACs do not depend on them; nothing is downloaded). Writes
``<out-dir>/structural_<device>[_<dtype>].json``, ``.md`` and ``.png`` (speedup against full MAC ratio).
Each variant is built once; the two width bisections dominate the build (``--width-steps``).

    python benchmarks/structural.py                                  # CPU, fp32, batch 16, 10 pairs
    python benchmarks/structural.py --pairs 3 --warmup 1             # a quicker pass
    python benchmarks/structural.py --models DeiT-S --variants hiap star --pairs 1 --warmup 0 --batch-size 2
    python benchmarks/structural.py --device cuda --dtype bfloat16   # batch 256
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from depth_speed import CONFIGS
from hiap_deit import DESCRIBED, described_gates
from profile_deit import DTYPES, MODELS, results_stem, write_results
from star_deit import ACS_GAMMA, fitted_acs, static_star
from torch import nn

import vitprune
from vitprune.measure import CONVENTIONS, MacTarget, compare_speed, count_macs
from vitprune.methods.hiap import extract, layer_shapes
from vitprune.methods.width import prune_width_to_macs
from vitprune.plotting import figure, save_figure
from vitprune.surgery import prune_depth, prune_mlp_neurons

VARIANTS = ("depth", "width", "vbp", "star", "hiap", "hetdpt+")
#: Model -> the ``depth_speed.CONFIGS`` layer sets it is depth-pruned with (DeiT-T has no paper configuration).
DEPTH = {"DeiT-T": "DeiT-S, 8 layers", "DeiT-S": "DeiT-S, 8 layers", "DeiT-B": "DeiT-B, 10 layers"}
STAR_RHO = 0.7
#: DeiT-S's units, which HiAP's description (``hiap_deit.DESCRIBED``) keeps a share of: 6 heads of 64 dims, 1536 FFN
#: neurons in every block. The shares scale the description to DeiT-T/B.
_DEIT_S_UNITS = {"heads": 6, "dims": 64, "early": 1536, "late": 1536}
HIAP_FRACTIONS = {unit: DESCRIBED[unit] / _DEIT_S_UNITS[unit] for unit in DESCRIBED}
VBP_RATIO = 0.5
ROUND_TO = 8
MARKERS = {"DeiT-T": "o", "DeiT-S": "s", "DeiT-B": "^"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--device", default="cpu", help="'cpu' or 'cuda' (default: cpu)")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--batch-size", type=int, default=None, help="default: 16 on CPU, 256 on CUDA")
    parser.add_argument("--pairs", type=int, default=10, help="alternating timed pairs per variant")
    parser.add_argument("--warmup", type=int, default=2, help="untimed pairs first")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--width-steps", type=int, default=6,
                        help="bisection steps of prune_width_to_macs, each one full torch-pruning plan (the slow "
                             "part of the build); 6 leaves the ratio within 0.95/2^6 = 0.015 of the target's")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)
    if args.batch_size is None:
        args.batch_size = 256 if torch.device(args.device).type == "cuda" else 16
    return args


@dataclass
class _Start:
    """What every variant of one model is built from."""

    label: str
    dense: nn.Module
    #: The depth configuration: the depth row itself, the width row's MAC target and hetdpt+'s first step.
    depth: nn.Module
    depth_text: str
    width_steps: int


def _widths(model: nn.Module) -> str:
    """Embedding width, head dims and FFN widths left, as ranges over blocks."""
    views = vitprune.get_adapter(model).blocks()
    heads = sorted({v.attn.head_dim for v in views if v.attn is not None})
    ffn = sorted({v.mlp.hidden_features for v in views if v.mlp.hidden_features is not None})

    def span(values: list[int]) -> str:
        return "-" if not values else str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"

    return f"embed {vitprune.get_adapter(model).embed_dim}, head dim {span(heads)}, FFN {span(ffn)}"


def _depth(start: _Start) -> tuple[nn.Module, str, dict[str, Any]]:
    _, attention, activation, _ = CONFIGS[DEPTH[start.label]]
    return start.depth, start.depth_text, {"attention": attention, "activation": activation}


def _to_macs(model: nn.Module, target: int, steps: int) -> tuple[str, dict[str, Any]]:
    """Width-prune ``model`` in place to at most ``target`` full MACs; its description and details."""
    ratio, plan = prune_width_to_macs(model, MacTarget.absolute(target), round_to=ROUND_TO, steps=steps)
    text = f"isomorphic width (magnitude), ratio {ratio:.4f}, round_to {ROUND_TO}: {_widths(model)}"
    kept = {"embed": None if plan.embed is None else len(plan.embed),
            "head_dims": {b: len(k) for b, k in plan.head_dims.items()},
            "heads": {b: len(k) for b, k in plan.heads.items()},
            "neurons": {b: len(k) for b, k in plan.neurons.items()}}
    return text, {"width_ratio": ratio, "round_to": ROUND_TO, "width_steps": steps, "target_macs_full": target,
                  "width_plan_kept": kept}


def _width(start: _Start) -> tuple[nn.Module, str, dict[str, Any]]:
    model = copy.deepcopy(start.dense)
    text, info = _to_macs(model, count_macs(start.depth).macs, start.width_steps)
    return model, f"{text}; to the depth row's full MACs", info


def _vbp(start: _Start) -> tuple[nn.Module, str, dict[str, Any]]:
    model = copy.deepcopy(start.dense)
    hidden = layer_shapes(model)[0].hidden
    kept = hidden - math.ceil(VBP_RATIO * hidden)
    for view in vitprune.get_adapter(model).blocks():
        prune_mlp_neurons(model, view.index, list(range(kept)))
    # VBP ranks neurons globally by variance, so trained weights give uneven per-block widths at the same total.
    text = (f"{VBP_RATIO:.0%} of FFN neurons removed, uniformly: {kept} of {hidden} kept in every block "
            "(random weights, so which neurons is immaterial)")
    return model, text, {"ratio": VBP_RATIO, "kept_per_block": kept}


def _star(start: _Start) -> tuple[nn.Module, str, dict[str, Any]]:
    gamma = ACS_GAMMA[start.label]
    model, rates = static_star(start.dense, gamma, STAR_RHO)
    acs = fitted_acs(len(rates), gamma)
    text = (f"static STAR, rho {STAR_RHO}, alpha 1 ([CLS] attention); keep rates from the ACS profile "
            f"(l/(L-1))^{gamma} (STAR note §1.10): {' '.join(f'{r:.2f}' for r in rates)}")
    return model, text, {"rho": STAR_RHO, "gamma": gamma, "acs_profile": acs, "keep_rates": rates, "alpha": 1.0}


def _hiap(start: _Start) -> tuple[nn.Module, str, dict[str, Any]]:
    model = copy.deepcopy(start.dense)
    shape = layer_shapes(model)[0]
    kept = {"heads": math.ceil(HIAP_FRACTIONS["heads"] * shape.heads),
            "dims": round(HIAP_FRACTIONS["dims"] * shape.head_dim),
            "early": round(HIAP_FRACTIONS["early"] * shape.hidden),
            "late": round(HIAP_FRACTIONS["late"] * shape.hidden)}
    extract(model, described_gates(model, **kept))
    blocks = len(vitprune.get_adapter(model).blocks())
    half = blocks // 2
    source = ("HiAP's described DeiT-S architecture" if start.label == "DeiT-S" else
              "HiAP's DeiT-S description scaled (half the heads, rounded up; half the value dims; FFN fractions "
              f"{DESCRIBED['early']}/{_DEIT_S_UNITS['early']} and {DESCRIBED['late']}/{_DEIT_S_UNITS['late']})")
    text = (f"{source}: {kept['heads']} of {shape.heads} heads x {kept['dims']} of {shape.head_dim} value dims; "
            f"FFN {kept['early']} of {shape.hidden} (blocks 0-{half - 1}), {kept['late']} ({half}-{blocks - 2}), "
            f"closed ({blocks - 1})")
    return model, text, {"kept": kept}


def _hetdpt_plus(start: _Start) -> tuple[nn.Module, str, dict[str, Any]]:
    model = copy.deepcopy(start.depth)
    text, info = _to_macs(model, count_macs(start.dense).macs // 2, start.width_steps)
    return model, f"depth row's layers, then {text}; to half the dense full MACs", info


BUILDERS: dict[str, Callable[[_Start], tuple[nn.Module, str, dict[str, Any]]]] = {
    "depth": _depth, "width": _width, "vbp": _vbp, "star": _star, "hiap": _hiap, "hetdpt+": _hetdpt_plus,
}


def build(label: str, variants: list[str], width_steps: int) -> tuple[nn.Module, list[dict[str, Any]],
                                                                      dict[str, nn.Module]]:
    """The dense model, the table rows (dense first, structure only) and each variant's model, built once."""
    name, config = MODELS[label], DEPTH[label]
    _, attention, activation, _ = CONFIGS[config]
    dense = vitprune.create_model(name)
    depth = copy.deepcopy(dense)
    prune_depth(depth, attention, activation)
    source = (f"HetDPT, {config}" if config.startswith(label) else
              f"HetDPT's {config.split(',')[0]} layer sets: the paper has no {label} configuration, and both have "
              "12 blocks")
    depth_text = f"attention {attention} + GELU {activation} removed ({source})"
    start = _Start(label, dense, depth, depth_text, width_steps)
    checkpoint = f"timm {name}, random weights (structure only)"
    dense_figures = count_macs(dense).totals()
    rows = [{"model": label, "timm_name": name, "variant": "dense", "configuration": "unpruned",
             "checkpoint": checkpoint, **dense_figures, "mac_ratio_full": 1.0, "mac_ratio_linear": 1.0}]
    models = {}
    for variant in variants:
        began = time.perf_counter()
        row = {"model": label, "timm_name": name, "variant": variant, "checkpoint": checkpoint}
        model, text, info = BUILDERS[variant](start)
        figures = count_macs(model).totals()
        rows.append({**row, "configuration": text, **figures,
                     "mac_ratio_full": dense_figures["macs_full"] / figures["macs_full"],
                     "mac_ratio_linear": dense_figures["macs_linear"] / figures["macs_linear"],
                     "build_seconds": time.perf_counter() - began, "details": info})
        models[variant] = model
    return dense, rows, models


def time_rows(dense: nn.Module, rows: list[dict[str, Any]], models: dict[str, nn.Module],
              args: argparse.Namespace) -> None:
    """Each built variant against the dense model in alternating pairs; adds the speed figures to its row."""
    for row in rows:
        model = models.get(row["variant"])
        if model is None:
            continue
        comparison = compare_speed(model, dense, batch_size=args.batch_size, device=args.device,
                                   dtype=DTYPES[args.dtype], warmup=args.warmup, pairs=args.pairs,
                                   threads=args.threads, progress=sys.stderr.isatty())
        speed = comparison.to_dict()
        loads = [x for x in (speed["a"]["other_load"], speed["b"]["other_load"]) if x is not None]
        row |= {**speed, "speedup_over_mac_ratio": speed["speedup"] / row["mac_ratio_full"],
                "other_load": max(loads, default=None)}
        print(f"{row['model']} {row['variant']}: {row['macs_full'] / 1e9:.3f} GMACs full, MAC ratio "
              f"{row['mac_ratio_full']:.3f}, speedup {speed['speedup']:.3f} [IQR {speed['speedup_q1']:.3f}-"
              f"{speed['speedup_q3']:.3f}], dense {speed['b']['median_ms']:.1f} ms, variant "
              f"{speed['a']['median_ms']:.1f} ms", file=sys.stderr, flush=True)


def _context_text(report: dict[str, Any]) -> str:
    env = report["environment"]
    return f"{env['device_name']} ({env['device']}), {env['dtype']}, batch {report['batch_size']}"


def plot(report: dict[str, Any], path: Path) -> Path:
    """Speedup (median, IQR bars) against the full-convention MAC ratio: colour per variant, marker per model."""
    from matplotlib.lines import Line2D

    fig = figure(figsize=(8, 5.5))
    ax = fig.subplots()
    colours = {v: f"C{i}" for i, v in enumerate(VARIANTS)}
    timed = [r for r in report["results"] if "speedup" in r]
    for r in timed:
        ax.errorbar(r["mac_ratio_full"], r["speedup"], yerr=[[r["speedup"] - r["speedup_q1"]],
                                                             [r["speedup_q3"] - r["speedup"]]],
                    fmt=MARKERS[r["model"]], color=colours[r["variant"]], markersize=7, capsize=3)
    high = max([1.0] + [x for r in timed for x in (r["mac_ratio_full"], r["speedup_q3"])]) * 1.05
    ax.plot([1, high], [1, high], "--", color="gray")
    variants = [Line2D([], [], color=colours[v], marker="o", ls="", label=v)
                for v in VARIANTS if any(r["variant"] == v for r in timed)]
    models = [Line2D([], [], color="black", marker=MARKERS[m], ls="", label=m)
              for m in MARKERS if any(r["model"] == m for r in timed)]
    ax.add_artist(ax.legend(handles=variants, title="variant", loc="upper left", fontsize=8))
    ax.legend(handles=models + [Line2D([], [], color="gray", ls="--", label="y = x")], title="model",
              loc="lower right", fontsize=8)
    ax.set(xlabel="MAC ratio dense / variant (full convention: linear/conv + attention matmuls)",
           ylabel=f"speedup, dense time / variant time (median, IQR)\n{_context_text(report)}",
           title=f"DeiT variants, random weights: {_context_text(report)}, {report['pairs']} pairs")
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def _g(n: int) -> str:
    return f"{n / 1e9:.3f}"


def to_markdown(report: dict[str, Any]) -> str:
    """The header paragraph (hardware, settings, conventions, checkpoints) and the one table."""
    env = report["environment"]
    checkpoints = "; ".join(f"{m}: {c}" for m, c in report["checkpoints"].items())
    lines = [
        "# Every method and chain on DeiT's shapes: MACs and measured speedup",
        "",
        (f"{_context_text(report)}, {env['threads']} threads, torch {env['torch']}, timm {env['timm']}, vitprune "
         f"{env['vitprune']}; each variant against its dense model in {report['pairs']} alternating pairs after "
         f"{report['warmup']} warm-up pairs, in one process; {report['date']}. MACs per image at 3x224x224: *full* "
         f"= {CONVENTIONS['full']}; *linear* = {CONVENTIONS['linear']}. MAC ratio = dense / variant (full); "
         "speedup = dense time / variant time per pair, median [IQR]; speedup / MAC ratio = 1 when the variant "
         f"turns its MAC cut into exactly as much speed. Starting checkpoints: {checkpoints}."),
        "",
        ("| Model | Variant | Configuration | Params (M) | GMACs full | GMACs linear | MAC ratio (full) | "
         "Speedup median [IQR] | Speedup / MAC ratio |"),
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['variant']} | {r['configuration']} | | | | | | |")
            continue
        speed = ("reference | |" if r["variant"] == "dense" else
                 f"{r['speedup']:.3f} [{r['speedup_q1']:.3f}-{r['speedup_q3']:.3f}] | "
                 f"{r['speedup_over_mac_ratio']:.3f} |")
        lines.append(f"| {r['model']} | {r['variant']} | {r['configuration']} | {r['params'] / 1e6:.2f} | "
                     f"{_g(r['macs_full'])} | {_g(r['macs_linear'])} | {r['mac_ratio_full']:.3f} | {speed}")
    loads = [r["other_load"] for r in report["results"] if r.get("other_load") is not None]
    if loads:
        lines += ["", (f"Largest share of the machine's CPU used by other processes during a comparison: "
                       f"{max(loads):.1%} (above a few percent the speedups are suspect; per row in the JSON).")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Build and count every variant, time it against its dense model, write the JSON, Markdown and plot."""
    args = parse_args(argv)
    torch.manual_seed(0)
    results = []
    for label in args.models:
        dense, rows, models = build(label, args.variants, args.width_steps)
        time_rows(dense, rows, models, args)
        results.extend(rows)
        del dense, models  # freed before the next model's variants are built
    timed = [r for r in results if "speedup" in r]
    if not timed:
        raise SystemExit("no variant could be built, so nothing was timed")
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "checkpoints": {r["model"]: r["checkpoint"] for r in results},
        "environment": {k: v for k, v in timed[0]["a"]["context"].items() if k != "batch_size"},
        "batch_size": args.batch_size, "pairs": args.pairs, "warmup": args.warmup, "threads": args.threads,
        "device": args.device, "dtype": args.dtype, "width_steps": args.width_steps,
        "conventions": CONVENTIONS, "results": results,
    }
    stem = results_stem("structural", args.device, args.dtype)
    write_results(args.out_dir, stem, report, to_markdown(report))
    print(f"wrote {plot(report, args.out_dir / f'{stem}.png')}")


if __name__ == "__main__":
    main()
