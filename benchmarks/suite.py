"""Every benchmark in one command: regenerate all results files, plots and the generated results page.

By default (``--protocol quick``) each script runs with settings that fit the whole suite in under half an
hour on a 2-core CPU: fewer timed pairs and processes, fewer budgets, one seed, short fine-tuning. Each
script's own defaults (``--protocol paper``: more pairs, processes, budgets and seeds) take hours. The
digits model is trained from scratch first (a fresh ``VITPRUNE_CACHE``) unless ``--reuse-cache``.

A full run writes into ``<out-dir>.partial/`` and replaces ``<out-dir>`` only when every job has
finished, so an interrupted run leaves the previous results whole; ``--resume`` continues it at the first
unfinished job. ``--only`` reruns some jobs in place. Every job's output goes to
``<out-dir>/logs/<job>.log``; ``suite.json`` records each job's command and wall time. The page
``<out-dir>/README.md`` (and the README's results excerpt) are generated from the results files by
``report.py``.

    python benchmarks/suite.py                         # everything, quick protocol, into benchmarks/results
    python benchmarks/suite.py --only digits structural
    python benchmarks/suite.py --resume                # after an interruption
    python benchmarks/suite.py --gpu                   # adds the GPU columns (batch 256, fp32 and fp16)
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import torch

from vitprune.atomic import read_json, write_json
from vitprune.measure import device_name

HERE = Path(__file__).resolve().parent
SUITE_FILE = "suite.json"
_TRAIN_DIGITS = "from vitprune.models.zoo import trained_digits_vit; trained_digits_vit(progress=False)"
#: The paper protocol's GPU timing: 10 warm-up and 100 timed iterations at batch 256.
_GPU = ["--device", "cuda", "--batch-size", "256", "--warmup", "10", "--pairs", "100"]


class Job(NamedTuple):
    """One run: a benchmark script (``name.py``, given ``--out-dir``) or a ``vitprune`` command (given ``--out`` the
    folder ``out``), with its arguments under the quick and the paper protocol (the script's defaults)."""

    name: str
    script: str | None
    quick: list[str]
    paper: list[str]
    gpu: bool = False
    out: str = ""


JOBS = [
    Job("digits-model", None, [], []),
    Job("startup", "startup.py", [], []),
    Job("profile_deit", "profile_deit.py", ["--repeats", "5", "--warmup", "1"], []),
    Job("structural", "structural.py", ["--pairs", "3", "--warmup", "1", "--batch-size", "8"], []),
    Job("depth_speed", "depth_speed.py", ["--pairs", "4", "--warmup", "1"], []),
    Job("composition_speed", "composition_speed.py", ["--models", "DeiT-S", "--pairs", "3", "--warmup", "1",
                                                    "--processes", "1"], []),
    Job("vbp_deit", "vbp_deit.py", ["--pairs", "4", "--warmup", "1"], []),
    Job("star_deit", "star_deit.py", ["--pairs", "5", "--warmup", "1"], []),
    Job("star_overhead", "star_overhead.py", ["--pairs", "5", "--warmup", "1"], []),
    Job("tome_deit", "tome_deit.py", ["--pairs", "4", "--warmup", "1"], []),
    Job("families_speed", "families_speed.py", ["--pairs", "5", "--warmup", "1"], []),
    Job("hiap_deit", "hiap_deit.py", ["--pairs", "6", "--warmup", "1"], []),
    Job("onnx_deit", "onnx_deit.py", ["--pairs", "4", "--warmup", "1"], []),
    Job("hetdpt_plus_budgets", "hetdpt_plus_budgets.py", ["--steps", "10"], []),
    Job("paper_tables", "paper_tables.py", [], []),
    Job("engine_overhead", "engine_overhead.py", ["--steps", "10", "--pairs", "3"], []),
    Job("digits", "digits.py", [], []),
    Job("gradient_disparity", "vitprune analyze gradient-disparity digits-vit --data digits", [], [],
        out="hetdpt_digits"),
    Job("recovery", "vitprune analyze recovery digits-vit --data digits --epochs 1", [], [], out="hetdpt_digits"),
    Job("hetdpt_digits", "hetdpt_digits.py", ["--budgets", "8", "--methods", "hetdpt", "te-static", "attention-only",
                                          "--speed-pairs", "5"], []),
    Job("vbp_digits", "vbp_digits.py", ["--ratios", "0.5", "--seeds", "0"], []),
    Job("star_digits", "star_digits.py", ["--rhos", "0.5", "--seeds", "0", "--lrp-images", "128"], []),
    Job("hiap_digits", "hiap_digits.py", ["--budgets", "0.5", "--epochs", "4", "--speed-pairs", "6",
                                          "--speed-processes", "1"], []),
    Job("structural_gpu_fp32", "structural.py", _GPU, _GPU, gpu=True),
    Job("structural_gpu_fp16", "structural.py", [*_GPU, "--dtype", "float16"], [*_GPU, "--dtype", "float16"],
        gpu=True),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [job.name for job in JOBS]
    parser.add_argument("--only", nargs="+", choices=names, help="run these jobs in place (default: all, from scratch)")
    parser.add_argument("--protocol", choices=("quick", "paper"), default="quick")
    parser.add_argument("--gpu", action="store_true", help="also run the GPU jobs (needs CUDA)")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted full run")
    parser.add_argument("--reuse-cache", action="store_true", help="use the cached digits model instead of training it")
    parser.add_argument("--readme", type=Path, default=HERE.parent / "README.md",
                        help="README whose results excerpt is regenerated (only with the default --out-dir)")
    parser.add_argument("--out-dir", type=Path, default=HERE / "results")
    return parser.parse_args(argv)


def command(job: Job, protocol: str, out_dir: Path) -> list[str]:
    """The command line that runs ``job``."""
    if job.script is None:
        return [sys.executable, "-c", _TRAIN_DIGITS]
    extra = job.quick if protocol == "quick" else job.paper
    if job.script.startswith("vitprune "):
        return [sys.executable, "-m", *job.script.split(), *extra, "--out", str(out_dir / job.out)]
    return [sys.executable, str(HERE / job.script), *extra, "--out-dir", str(out_dir)]


def run_jobs(jobs: list[Job], protocol: str, out_dir: Path, record: dict[str, Any], cache: Path | None) -> None:
    """Run ``jobs`` in order into ``out_dir``, recording each in ``record`` (saved after every job); ``cache`` is
    the ``VITPRUNE_CACHE`` they share (``None``: the user's)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    env = dict(os.environ) | ({"VITPRUNE_CACHE": str(cache)} if cache is not None else {})
    (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    done = {entry["name"] for entry in record["jobs"] if entry["returncode"] == 0}
    todo = [job for job in jobs if job.name not in done]
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), transient=False) as progress:
        task = progress.add_task("benchmarks", total=len(todo))
        for job in todo:
            progress.update(task, description=f"{job.name}")
            argv = command(job, protocol, out_dir)
            log = out_dir / "logs" / f"{job.name}.log"
            before = _stamps(out_dir)
            start = time.perf_counter()
            with log.open("w") as handle:
                returncode = subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT, env=env,
                                            cwd=HERE).returncode
            seconds = time.perf_counter() - start
            written = sorted(path for path, stamp in _stamps(out_dir).items() if before.get(path) != stamp)
            record["jobs"] = [e for e in record["jobs"] if e["name"] != job.name] + [{
                "name": job.name, "command": _shown(argv), "out": job.out, "files": written,
                "seconds": seconds, "returncode": returncode}]
            write_json(out_dir / SUITE_FILE, record)
            progress.advance(task)
            progress.console.print(f"{job.name}: {seconds:.0f} s" + ("" if returncode == 0 else " FAILED"))
            if returncode != 0:
                raise SystemExit(f"benchmark {job.name} failed (exit status {returncode}); its output is in {log}; "
                                 "fix it and run again with --resume")


def _stamps(out_dir: Path) -> dict[str, int]:
    """Modification time of every results file under ``out_dir`` (its path relative to it), logs and record aside:
    what a job changed is what it wrote, so the page can name the job behind each file."""
    return {str(path.relative_to(out_dir)): path.stat().st_mtime_ns for path in out_dir.rglob("*")
            if path.is_file() and path.parts[len(out_dir.parts)] != "logs" and path.name != SUITE_FILE}


def _shown(argv: list[str]) -> str:
    """The command as a user would type it from the repository root (the output folder left out)."""
    for flag in ("--out-dir", "--out"):
        if flag in argv:
            argv = argv[:argv.index(flag)]
    if argv[1] == "-m":
        return shlex.join(argv[2:])
    return shlex.join(["python", *argv[1:]]).replace(str(HERE.parent) + "/", "")


def main(argv: list[str] | None = None) -> None:
    """Run the chosen jobs, then regenerate the results page and the README excerpt."""
    from report import update_readme, write_page

    args = parse_args(argv)
    jobs = [job for job in JOBS if (args.gpu or not job.gpu) and (not args.only or job.name in args.only)]
    full = not args.only
    target = args.out_dir
    work = target.with_name(target.name + ".partial") if full else target
    # A full run trains the digits model from scratch in a cache of its own, kept until the run is complete.
    cache = target.parent / f".{target.name}.cache" if full and not args.reuse_cache else None
    if full and not args.resume:
        for stale in (work, cache):
            if stale is not None and stale.exists():
                shutil.rmtree(stale)
    keep = (args.resume or not full) and (work / SUITE_FILE).exists()
    record = read_json(work / SUITE_FILE) if keep else {"jobs": []}
    record |= {"protocol": args.protocol, "cpu": device_name(torch.device("cpu")), "cpu_count": os.cpu_count(),
               "platform": platform.platform(), "python": platform.python_version()}
    run_jobs(jobs, args.protocol, work, record, cache)
    record["seconds"] = sum(entry["seconds"] for entry in record["jobs"])
    record["date"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    write_json(work / SUITE_FILE, record)
    write_page(work)
    if full:
        old = target.with_name(target.name + ".old")
        if target.exists():
            target.rename(old)
        work.rename(target)
        shutil.rmtree(old, ignore_errors=True)
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)
    if args.out_dir == HERE / "results":
        update_readme(args.readme, target)
    print(f"wrote {target} ({record['seconds'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
