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

from vitprune.cli import main as vitprune

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "runs" / "compare-cluttered"
RESULTS = ROOT / "benchmarks" / "results" / "compare"
COMMAND = ["compare", "cluttered-mnist-vit", "--data", "cluttered-mnist", "--target-macs", "0.7,0.5",
           "--speedup", "1.5", "--seeds", "0,1,2", "--time-batches", "1", "--runtime", "torch,onnxruntime",
           "--out", str(RUN.relative_to(ROOT))]


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
