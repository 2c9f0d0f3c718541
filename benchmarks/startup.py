"""How long the command line takes to start: CPU time of ``vitprune --help``, ``--version`` and a command's help.

Each command runs ``--runs`` times in a fresh process, after one untimed run that fills the file cache and writes
the compiled bytecode, which the timed runs read as a user's Python does (whatever ``PYTHONDONTWRITEBYTECODE`` says
here). The figure is the child's user + system CPU time (``getrusage``), which other processes on the machine
disturb less than the wall time, also recorded. The target is under 0.5 s of CPU for ``--help`` and ``--version``:
the command line is built from configs that import no torch, and each command imports what it uses when it runs.
For scale, the last row times ``import torch, timm``, which every start cost before. Writes
``<out-dir>/startup.{json,md}``.

    python benchmarks/startup.py             # about 30 s
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from profile_deit import write_results

from vitprune import __version__
from vitprune.measure import device_name

#: The console script beside this interpreter: what a user's ``vitprune`` runs.
VITPRUNE = str(Path(sys.executable).with_name("vitprune"))
#: Each timed command by the name the results give it, with the CPU seconds it must stay under (``None``: a
#: reference, no target).
COMMANDS: dict[str, tuple[list[str], float | None]] = {
    "vitprune --help": ([VITPRUNE, "--help"], 0.5),
    "vitprune --version": ([VITPRUNE, "--version"], 0.5),
    "vitprune prune vbp --help": ([VITPRUNE, "prune", "vbp", "--help"], None),
    "python -c 'import torch, timm'": ([sys.executable, "-c", "import torch, timm"], None),
}
#: The commands' environment: this one, but writing bytecode as Python does by default.
ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each command (the median is reported)")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).with_name("results"))
    return parser.parse_args(argv)


def time_command(argv: list[str]) -> tuple[float, float]:
    """One run of ``argv``: its CPU seconds (user + system, the child's alone) and wall seconds."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=ENV)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Time every command; the report."""
    load = os.getloadavg()[0]
    results = []
    for name, (argv, target) in COMMANDS.items():
        time_command(argv)  # untimed: fills the file cache and writes the bytecode
        cpu, wall = zip(*(time_command(argv) for _ in range(args.runs)))
        results.append({"command": name, "target_cpu_s": target, "cpu_s": list(cpu), "wall_s": list(wall),
                        "median_cpu_s": statistics.median(cpu), "median_wall_s": statistics.median(wall)})
        print(f"{name}: {statistics.median(cpu):.3f} s CPU (median of {args.runs})", flush=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "runs": args.runs,
            "environment": {"cpu": device_name(torch.device("cpu")), "cpu_count": os.cpu_count(),
                            "platform": platform.platform(), "python": platform.python_version(),
                            "vitprune": __version__, "torch": metadata.version("torch"),
                            "load_average_1min": {"before": load, "after": os.getloadavg()[0]}},
            "results": results}


def to_markdown(report: dict[str, Any]) -> str:
    """One row per command."""
    env = report["environment"]
    load = env["load_average_1min"]
    lines = [
        "# Startup: CPU time of `vitprune --help` and `--version`",
        "",
        f"Each command in a fresh process, {report['runs']} timed runs after one untimed one (which writes the "
        "bytecode the others read); CPU = the process's user + system time (median, with the range), which other "
        "processes disturb less than the wall time. Target: "
        f"under 0.5 s of CPU for `--help` and `--version`. {env['cpu']} ({env['cpu_count']} CPUs), Python "
        f"{env['python']}, torch {env['torch']}, vitprune {env['vitprune']}; load average {load['before']:.2f} before "
        f"the runs, {load['after']:.2f} after. {report['date']}.",
        "",
        "| command | CPU s (median) | CPU s (min-max) | wall s (median) | target |",
        "|---|---:|---:|---:|---|",
    ]
    for row in report["results"]:
        target = "-" if row["target_cpu_s"] is None else (
            f"< {row['target_cpu_s']:g} s: {'met' if row['median_cpu_s'] < row['target_cpu_s'] else 'MISSED'}")
        lines.append(f"| `{row['command']}` | {row['median_cpu_s']:.3f} | {min(row['cpu_s']):.3f}-"
                     f"{max(row['cpu_s']):.3f} | {row['median_wall_s']:.3f} | {target} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Run and write the JSON and Markdown."""
    args = parse_args(argv)
    report = run(args)
    write_results(args.out_dir, "startup", report, to_markdown(report))
    print(to_markdown(report))


if __name__ == "__main__":
    main()
