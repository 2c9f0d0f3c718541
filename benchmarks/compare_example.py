"""The committed example of ``vitprune compare``: ``cluttered-mnist-vit`` (seed-0 checkpoint, trained on first use;
needs ``vitprune[bench]``) at 70% and 50% of its MACs and a 1.5x measured speedup on the quick budget under seeds 0, 1
and 2, timed at batch 1 and 16 in PyTorch and ONNX Runtime, run on this machine's CPU.

It runs the command below into ``runs/compare-cluttered`` (resuming a run that stopped), then copies the answer
(report.md, report.json, pareto.png) and every arm's chain file to ``benchmarks/results/compare/``; the models stay in
the run directory.

    python benchmarks/compare_example.py
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from vitprune.cli import main as vitprune
from vitprune.comparison.page import duration
from vitprune.comparison.report import Target

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "runs" / "compare-cluttered"
RESULTS = ROOT / "benchmarks" / "results" / "compare"
COMMAND = ["compare", "cluttered-mnist-vit", "--data", "cluttered-mnist", "--target-macs", "0.7,0.5",
           "--speedup", "1.5", "--seeds", "0,1,2", "--time-batches", "1", "--runtime", "torch,onnxruntime",
           "--out", str(RUN.relative_to(ROOT))]


def summary(report: dict[str, Any]) -> list[str]:
    """The README's paragraph on the comparison (links relative to the results folder): each target's pick, the
    fastest arm on target where it is another, and the arms that cannot reach it, rendered from the report alone."""
    arms = report["arms"]
    titles = {a["arm"]: a["title"] for a in arms}
    parts = []
    for label in report["targets"]:
        pick, done = report["pick"].get(label), [a for a in arms if a["target"] == label and a["met"]]
        text = f"at {Target.parse(label).describe()} "
        if pick is None:
            text += "no arm is on target"
        else:
            text += f"{titles[pick['arm']]} ({pick['top1']:.1f}%, {pick['speedup']:.2f}×"
            fastest = max(done, key=lambda a: a["speedup"])
            if fastest["arm"] != pick["arm"]:
                text += (f"; the fastest on target, {fastest['title']} at {fastest['top1']:.1f}% and "
                         f"{fastest['speedup']:.2f}×, is not shown within the tolerance")
            text += ")"
        unreachable = [f"`{a['arm']}`" for a in arms if a["target"] == label and a["status"] == "unreachable"]
        if unreachable:
            text += f", which {' and '.join(unreachable)} cannot reach"
        parts.append(text)
    dense, speed = report["dense"], report["speed"]
    seeds = ", ".join(map(str, report["seeds"]))
    tolerance = next(iter(p for p in report["pick"].values() if p), {}).get("tolerance")
    rule = ("no arm" if tolerance is None else
            f"the fastest arm on target whose top-1 is shown to be at most {tolerance:g} point below the best arm's")
    return [f"**What to deploy at a target, from measured speed and accuracy:** [compare/report.md](compare/report.md) "
            f"is `vitprune compare` on "
            f"`{report['model']}` (dense {dense['top1']:.1f}% top-1; seeds {seeds}) on the "
            f"`{report['budget']['name']}` budget, timed at batch {speed['batch_size']} in {speed['runtimes'][0]} on "
            f"{speed['device']} with {speed['threads']} threads (`python benchmarks/compare_example.py`, "
            f"{duration(report['seconds'])}). It recommends {rule}: {'; '.join(parts)}."]


def main() -> None:
    """Run (or resume) the comparison from the repository root, then copy its answer here."""
    os.chdir(ROOT)  # the page's commands name the run directory from there
    resume = ["--resume"] if RUN.is_dir() else []
    try:
        vitprune([*COMMAND, *resume])
    except SystemExit as exc:
        if exc.code:
            raise
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name in ("report.md", "report.json", "pareto.png"):
        shutil.copy2(RUN / name, RESULTS / name)
    for chain in sorted(RUN.glob("arms/**/chain.json")):
        if chain.parent.parent.name != "steps":  # an arm's own chain file, not a nested HetDPT+ step's
            target = RESULTS / chain.relative_to(RUN)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(chain, target)
    print(f"copied the answer to {RESULTS.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
