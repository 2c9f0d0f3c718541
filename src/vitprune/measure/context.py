"""Where a timing was taken: hardware, software and settings, recorded next to every figure."""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass
from typing import Any

import timm
import torch

import vitprune


@dataclass(frozen=True)
class Context:
    """The conditions of a speed measurement; two timings are comparable only if these match."""

    device: str
    device_name: str
    dtype: str
    batch_size: int
    threads: int
    cpu_count: int | None
    #: 1-minute load average when the measurement started; well above zero means other work competed.
    load_avg_1m: float | None
    torch: str
    timm: str
    vitprune: str
    python: str
    platform: str
    cuda: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def collect_context(device: torch.device, dtype: torch.dtype, batch_size: int) -> Context:
    """The context of a measurement about to run on ``device`` (call it with the thread count already set)."""
    return Context(
        device=str(device),
        device_name=device_name(device),
        dtype=str(dtype).removeprefix("torch."),
        batch_size=batch_size,
        threads=torch.get_num_threads(),
        cpu_count=os.cpu_count(),
        load_avg_1m=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        torch=torch.__version__,
        timm=timm.__version__,
        vitprune=vitprune.__version__,
        python=platform.python_version(),
        platform=platform.platform(),
        cuda=torch.version.cuda if device.type == "cuda" else None,
    )


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
