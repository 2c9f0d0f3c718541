"""Where a timing was taken: hardware, software, settings, and how busy the machine was meanwhile."""

from __future__ import annotations

import contextlib
import os
import platform
import time
from collections.abc import Iterator
from dataclasses import dataclass

import timm
import torch

from vitprune.config import JsonRecord
from vitprune.version import __version__


@dataclass(frozen=True)
class Context(JsonRecord):
    """The conditions of a speed measurement; two timings are comparable only if these match."""

    device: str
    device_name: str
    dtype: str
    batch_size: int
    threads: int
    cpu_count: int | None
    torch: str
    timm: str
    vitprune: str
    python: str
    platform: str
    cuda: str | None
    #: CPU timings run with denormals flushed to zero (see :func:`~vitprune.measure.speed.measure_speed`).
    flush_denormal: bool = False


def collect_context(device: torch.device, dtype: torch.dtype, batch_size: int, *,
                    flush_denormal: bool = False) -> Context:
    """The context of a measurement about to run on ``device`` (call it with the thread count already set)."""
    return Context(
        device=str(device),
        device_name=device_name(device),
        dtype=str(dtype).removeprefix("torch."),
        batch_size=batch_size,
        threads=torch.get_num_threads(),
        cpu_count=os.cpu_count(),
        torch=torch.__version__,
        timm=timm.__version__,
        vitprune=__version__,
        python=platform.python_version(),
        platform=platform.platform(),
        cuda=torch.version.cuda if device.type == "cuda" else None,
        flush_denormal=flush_denormal,
    )


@dataclass
class OtherLoad:
    """Share of the machine's CPU time that other processes used during a measurement.

    0 means the machine was ours, 0.5 that half of all cores were busy elsewhere; ``None`` where
    ``/proc/stat`` is unavailable. Timings taken with a share above a few percent are suspect.
    """

    share: float | None = None


@contextlib.contextmanager
def watch_other_load() -> Iterator[OtherLoad]:
    """Measure :class:`OtherLoad` over the ``with`` block; the yielded object is filled in on exit."""
    load = OtherLoad()
    busy0, own0, wall0 = _machine_busy_seconds(), time.process_time(), time.perf_counter()
    yield load
    busy1, own1, wall1 = _machine_busy_seconds(), time.process_time(), time.perf_counter()
    if busy0 is not None and busy1 is not None and wall1 > wall0:
        other = (busy1 - busy0) - (own1 - own0)
        load.share = min(max(other / ((wall1 - wall0) * (os.cpu_count() or 1)), 0.0), 1.0)


def _machine_busy_seconds() -> float | None:
    # Non-idle CPU time of all processes since boot; /proc/stat counts in clock ticks.
    try:
        with open("/proc/stat", encoding="utf-8") as f:
            user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in f.readline().split()[1:8])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's model string."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return _cpu_model() or platform.processor() or platform.machine()


def _cpu_model() -> str | None:
    # platform.processor() is often empty or just the ISA on Linux; /proc/cpuinfo has the marketing name.
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
