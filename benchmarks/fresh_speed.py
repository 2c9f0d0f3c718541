"""Paired speed comparisons in fresh processes, shared by the benchmarks that time saved models.

Each call runs ``vitprune bench MODEL --vs OTHER --json`` (alternating pairs, :func:`vitprune.measure.compare_speed`)
in a new Python process. On the 2-core benchmark machine a speedup moves by up to ±20% from one fresh process to
the next, far more than the spread within one, and a model timed in the process that had just built or trained
it can run much slower than in a fresh one; so a benchmark times each model in several fresh processes and
reports the median of their speedups with the range (:func:`summarise`).

    from fresh_speed import bench_fresh, summarise
    runs = [bench_fresh("runs/pruned", "deit_small_patch16_224", batch_size=16, pairs=10) for _ in range(3)]
    print(summarise([run["speedup"] for run in runs]))
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Any


def bench_fresh(model: str, vs: str, *, batch_size: int, pairs: int, warmup: int = 3, device: str = "cpu",
                dtype: str = "float32", threads: int | None = None) -> dict[str, Any]:
    """One fresh process of ``vitprune bench model --vs vs``: its JSON (``Comparison.to_dict`` plus the names).

    ``model`` and ``vs`` are what the command's MODEL argument takes (a saved directory, a timm name,
    ``digits-vit``); a timm name gets random weights. ``speedup`` is time(vs) / time(model).
    """
    command = [sys.executable, "-m", "vitprune", "bench", model, "--vs", vs, "-b", str(batch_size),
               "--repeats", str(pairs), "--warmup", str(warmup), "--device", device, "--dtype", dtype, "--json"]
    if threads is not None:
        command += ["--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        # The child's own message, not only its exit status: capture_output would otherwise swallow it.
        raise RuntimeError(f"{' '.join(command)} failed with exit status {done.returncode}:\n{done.stderr.strip()}")
    return json.loads(done.stdout)


def summarise(speedups: list[float]) -> dict[str, float]:
    """Median and range of per-process speedups."""
    return {"median": statistics.median(speedups), "min": min(speedups), "max": max(speedups)}
