"""Token reduction's measured speed against its MAC ratio on the digits ViT, run by run, and what the token path costs
per block.

Starting checkpoint: vitprune's trained ``digits-vit`` (cached; trained on first use). Static STAR at ``--rho``
(default 0.6) as ``vitprune prune star`` builds it (ACS schedule over 500 training images, the paper's anchors, alpha
0.15 with an LRP prior over ``--lrp-images`` images), and ToMe at the ``r`` whose MACs come closest to STAR's. Each of
``--runs`` runs is a separate process that loads the saved models and times each against the dense model in
alternating pairs (``vitprune.measure.compare_speed``, batch ``--batch-size``); one run after another, so the machine
must be otherwise idle.

The token path's cost per block is measured against a bound: the STAR model with its selection replaced by keeping
the first tokens (the same token counts in every block, no [CLS] row, scoring, top-k or gather). Its speedup is what
STAR would reach if selecting cost nothing; ``(time(STAR) - time(bound)) / blocks that prune``, from pairs of the two,
is the token path's cost per block. The profile splits the STAR forward's operator time into those the selection adds
and the rest.

``--label`` names the code version measured (e.g. ``before`` and ``after`` a change to the token path); the results
file keeps every label's rows, so the page shows them side by side.

    python benchmarks/token_speed.py --label after        # about 4 minutes on 2 CPU cores
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from profile_deit import write_results
from star_overhead import SELECTION_OPS
from torch.profiler import ProfilerActivity, profile

import vitprune
from vitprune.adapters.tokens import TokenSelection, TokenState
from vitprune.measure import MacTarget, compare_speed, count_macs

#: Speedup over the MAC ratio that every run must reach (issue 53).
TARGET = 0.85
ARMS = ("star", "bound", "tome")


class _FirstTokens(TokenSelection):
    """The bound: keeps as many tokens as STAR, the first ones, without scoring them."""

    reads = "keys"  # the keys are at hand in every attention: nothing is computed for the signal

    def forward(self, x: torch.Tensor, state: TokenState, signal: torch.Tensor) -> tuple[torch.Tensor, TokenState]:
        return x[:, :self.num_prefix_tokens + self.keep_count(x.shape[1] - self.num_prefix_tokens)], state


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="current", help="name of this code version's rows (e.g. before, after)")
    parser.add_argument("--rho", type=float, default=0.6)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--lrp-images", type=int, default=256)
    parser.add_argument("--compile", action="store_true",
                        help="also time STAR against the dense model both under torch.compile (about 2 minutes more)")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def build(args: argparse.Namespace, where: Path) -> dict[str, Any]:
    """Save the dense, STAR and ToMe models under ``where``; their MACs and settings."""
    from vitprune.data import build_dataset, build_loader
    from vitprune.methods.star import apply_keep_rates, average_cosine_similarity, inter_layer_scores, keep_rates
    from vitprune.methods.star.config import STARConfig
    from vitprune.methods.tome import apply_merging, r_for_macs, r_schedule
    from vitprune.models.zoo import trained_digits_vit

    dense = trained_digits_vit(progress=sys.stderr.isatty())
    star_config = STARConfig()
    calibration = build_loader(build_dataset("digits", "train", input_size=vitprune.get_adapter(dense).input_size,
                                             is_training=False), 32, shuffle=False, seed=0)
    acs = average_cosine_similarity(dense, calibration, max_images=star_config.acs_images)
    prior = inter_layer_scores(dense, calibration, classes=star_config.classes, max_images=args.lrp_images,
                               progress=False).float()
    star = copy.deepcopy(dense)
    rates = keep_rates(acs, args.rho, anchor=star_config.anchor)
    apply_keep_rates(star, rates, alpha=star_config.alpha, prior=prior)
    dense_macs, star_macs = count_macs(dense).macs, count_macs(star).macs
    blocks = len(vitprune.get_adapter(dense).blocks())
    r = r_for_macs(dense, MacTarget(star_macs / dense_macs, share=True))
    tome = copy.deepcopy(dense)
    apply_merging(tome, r_schedule(r, 0.0, blocks))
    for name, model in (("dense", dense), ("star", star), ("tome", tome)):
        vitprune.save(model, where / name)
    return {"rates": [round(x, 4) for x in rates], "alpha": star_config.alpha, "anchor": star_config.anchor,
            "tome_r": r, "macs": {"dense": dense_macs, "star": star_macs, "tome": count_macs(tome).macs},
            "linear_mac_ratio": _linear(dense) / _linear(star),
            "hosts": sum(1 for rate in rates if rate < 1)}


def _linear(model: torch.nn.Module) -> int:
    return count_macs(model, convention="linear").macs


def bound_of(star: torch.nn.Module) -> torch.nn.Module:
    """The STAR model with every selection replaced by :class:`_FirstTokens`."""
    bound = copy.deepcopy(star)
    for module in bound.modules():
        if type(module) is TokenSelection:
            module.__class__ = _FirstTokens
    return bound


def child(args: argparse.Namespace) -> None:
    """One run: each arm against the dense model, then STAR against the bound; JSON on stdout."""
    models = {name: vitprune.load(args.child / name).eval() for name in ("dense", "star", "tome")}
    models["bound"] = bound_of(models["star"])
    out: dict[str, Any] = {}
    for arm in ARMS:
        cmp = compare_speed(models[arm], models["dense"], batch_size=args.batch_size, pairs=args.pairs,
                            warmup=args.warmup)
        out[arm] = {"speedup": cmp.speedup, "ms": cmp.a.latency_ms, "ms_dense": cmp.b.latency_ms,
                    "other_load": cmp.a.other_load}
    cmp = compare_speed(models["bound"], models["star"], batch_size=args.batch_size, pairs=args.pairs,
                        warmup=args.warmup)
    out["path_ms"] = statistics.median(a - b for a, b in zip(cmp.b.samples_ms, cmp.a.samples_ms, strict=True))
    print(json.dumps(out))


def selection_profile(star: torch.nn.Module, batch: int) -> dict[str, float]:
    """The STAR forward's operator time (profiled, per forward) in the selection's operators, by operator, in ms."""
    x = torch.randn(batch, *vitprune.get_adapter(star).input_size)
    torch.set_flush_denormal(True)
    with torch.inference_mode():
        for _ in range(3):
            star(x)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(20):
                star(x)
    times = {e.key: e.self_cpu_time_total / 20 / 1e3 for e in prof.key_averages()}
    ops = {k.removeprefix("aten::"): v for k, v in times.items() if k in SELECTION_OPS and v >= 0.01}
    return {"total_ms": sum(times.values()), "selection_ms": sum(ops.values()),
            "ops": dict(sorted(ops.items(), key=lambda kv: -kv[1]))}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Build the models, run ``--runs`` separate timing processes, profile STAR's forward."""
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        setup = build(args, where)
        runs = []
        for index in range(args.runs):
            done = subprocess.run([sys.executable, __file__, "--child", str(where), "--batch-size",
                                   str(args.batch_size), "--pairs", str(args.pairs), "--warmup", str(args.warmup)],
                                  check=True, capture_output=True, text=True)
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
            star = runs[-1]["star"]["speedup"]
            print(f"run {index + 1}: STAR {star:.3f}x ({star * setup['macs']['star'] / setup['macs']['dense']:.3f}"
                  f" of its MAC ratio), bound {runs[-1]['bound']['speedup']:.3f}x, ToMe "
                  f"{runs[-1]['tome']['speedup']:.3f}x; token path {runs[-1]['path_ms']:.2f} ms", flush=True)
        star_model = vitprune.load(where / "star").eval()
        compiled = _compiled(vitprune.load(where / "dense").eval(), star_model, args) if args.compile else None
    return {**setup, "runs": runs, "profile": selection_profile(star_model, args.batch_size), "compiled": compiled,
            "batch": args.batch_size, "pairs": args.pairs, "warmup": args.warmup, "rho": args.rho,
            "lrp_images": args.lrp_images, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}"}


def _compiled(dense: torch.nn.Module, star: torch.nn.Module, args: argparse.Namespace) -> list[float]:
    """STAR's speedups over the dense model, both under ``torch.compile`` (three comparisons after one compile)."""
    models = [torch.compile(m) for m in (star, dense)]
    size = vitprune.get_adapter(dense).input_size
    with torch.inference_mode():
        for m in models:
            m(torch.randn(args.batch_size, *size))
    return [compare_speed(*models, input_size=size, batch_size=args.batch_size, pairs=args.pairs,
                          warmup=args.warmup).speedup for _ in range(3)]


def _of_mac_ratio(version: dict[str, Any], arm: str, run: dict[str, Any]) -> float:
    macs = version["macs"]
    return run[arm]["speedup"] * macs["star" if arm == "bound" else arm] / macs["dense"]


def to_markdown(report: dict[str, Any]) -> str:
    """Per code version: each run's speedups over the MAC ratio, the token path's cost per block, the profile."""
    lines = ["# Token reduction on the digits ViT: measured speed against the MAC ratio", "",
             "Starting checkpoint: vitprune's trained `digits-vit` (65 tokens, 12 blocks, width 48). Static STAR as "
             "`vitprune prune star` builds it (ACS schedule, alpha 0.15 with an LRP prior) and ToMe at the r whose "
             "MACs come closest to STAR's, each timed against the dense model in alternating pairs (median "
             "speedup), every run a separate process, one after another on an otherwise idle machine. MAC ratio in "
             "the full convention (attention matmuls included). *bound*: the STAR model keeping the first tokens "
             "instead of the best ones (the same token counts; no [CLS] row, scores, top-k or gather), what STAR "
             "would reach if selecting cost nothing. *token path per block*: median over pairs of time(STAR) − "
             "time(bound), divided by the blocks that prune. "
             f"Target (issue 53): STAR ≥ {TARGET} of its MAC ratio in every run.", ""]
    for label, version in report["versions"].items():
        macs = version["macs"]
        runs = version["runs"]
        star = [_of_mac_ratio(version, "star", run) for run in runs]
        lines += [f"## `{label}`", "",
                  f"{version['date']}; {version['machine']}; batch {version['batch']}, {version['pairs']} pairs after "
                  f"{version['warmup']} warm-up runs. rho {version['rho']}: keep rates "
                  f"{', '.join(f'{r:.2f}' for r in version['rates'])}; MAC ratio STAR "
                  f"{macs['dense'] / macs['star']:.3f}, ToMe (r = {version['tome_r']}) "
                  f"{macs['dense'] / macs['tome']:.3f}.", "",
                  "| run | STAR speedup | of MAC ratio | bound speedup | of MAC ratio | ToMe speedup | of MAC ratio | "
                  "token path per block | dense ms |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for index, run in enumerate(runs, 1):
            lines.append(f"| {index} | {run['star']['speedup']:.3f} | {star[index - 1]:.3f} | "
                         f"{run['bound']['speedup']:.3f} | {_of_mac_ratio(version, 'bound', run):.3f} | "
                         f"{run['tome']['speedup']:.3f} | {_of_mac_ratio(version, 'tome', run):.3f} | "
                         f"{1e3 * run['path_ms'] / version['hosts']:.0f} µs | {run['star']['ms_dense']:.1f} |")
        held = sum(share >= TARGET for share in star)
        prof = version["profile"]
        ops = ", ".join(f"{k} {v:.2f}" for k, v in prof["ops"].items())
        bound = [_of_mac_ratio(version, "bound", run) for run in runs]
        path = [1e3 * run["path_ms"] / version["hosts"] for run in runs]
        speedups, full = [run["star"]["speedup"] for run in runs], macs["dense"] / macs["star"]
        lines += ["", f"STAR reaches {TARGET} of its MAC ratio in {held} of {len(star)} runs (lowest "
                  f"{min(star):.3f}, highest {max(star):.3f}); the bound, selecting at no cost, in "
                  f"{sum(share >= TARGET for share in bound)} of {len(bound)} (lowest {min(bound):.3f}). The token "
                  f"path costs {min(path):.0f}–{max(path):.0f} µs per pruning block.", ""]
        missed = sum(share < TARGET for share in bound)
        if missed:
            lines[-2] += (f" The bound misses the target in {missed} run{'s' if missed > 1 else ''} too: what keeps "
                          "STAR under it is not only the token path but the rest of the forward, which on 65 tokens "
                          "of width 48 does not shrink with the MACs (per-operator dispatch, attention kernels at a "
                          "few dozen tokens), and the run-to-run spread of this 2-core VM (the dense ms column).")
        if "linear_mac_ratio" in version:  # recorded since the after (624fa75) run
            linear = version["linear_mac_ratio"]
            lines[-2] += (f" Against the linear-only MAC ratio ({linear:.3f}) STAR's speedups are "
                          f"{min(speedups) / linear:.3f}–{max(speedups) / linear:.3f} of it.")
        if version.get("compiled"):
            compiled = version["compiled"]
            lines += [f"Both models under `torch.compile` (one process): STAR {', '.join(f'{c:.3f}' for c in compiled)}"
                      f"x, {min(compiled) / full:.3f}–{max(compiled) / full:.3f} of its MAC ratio.", ""]
        lines += [f"Profile of STAR's forward (operator time, per forward): {prof['total_ms']:.1f} ms, of which the "
                  f"selection's operators {prof['selection_ms']:.2f} ms ({ops}; ms).", ""]
    lines += ["Command: `python benchmarks/token_speed.py --label LABEL`.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Measure (or, with ``--child``, time one run), merge this label's rows into the results file, write the page."""
    args = parse_args(argv)
    if args.child is not None:
        child(args)
        return
    path = args.out_dir / "token_speed_cpu.json"
    report = json.loads(path.read_text()) if path.exists() else {"versions": {}}
    report["versions"][args.label] = measure(args)
    write_results(args.out_dir, "token_speed_cpu", report, to_markdown(report))


if __name__ == "__main__":
    main()
