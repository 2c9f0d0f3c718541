"""Each arm's final model timed as it would be deployed: against the dense model at every batch asked for (batch 1
is latency), in the dtype asked for, in PyTorch and in ONNX Runtime (the arm exported and checked against PyTorch
first), with its memory.

Every timing alternates the arm and the dense model pair by pair (:func:`~vitprune.measure.compare_speed`) and keeps
the median ratio with its quartiles, and each side's median time per batch.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.comparison.config import DTYPES, RUNTIMES
from vitprune.errors import VitpruneError
from vitprune.export import OnnxRuntimeModel, export_onnx, onnx_missing
from vitprune.measure import SpeedConfig, compare_speed

#: The dtypes PyTorch timings run in, by name (ONNX Runtime times the float32 export).
_DTYPES = {name: getattr(torch, name) for name in DTYPES}


def check_timing(runtimes: list[str], dtype: str, device: torch.device) -> None:
    """One line for a runtime or dtype that cannot run here: an unknown one, ONNX Runtime without the onnx extra,
    half precision on a CPU."""
    for runtime in runtimes:
        if runtime not in RUNTIMES:
            raise VitpruneError(f"unknown runtime {runtime!r} (choose from: {', '.join(RUNTIMES)})")
    if "onnxruntime" in runtimes and (missing := onnx_missing()) is not None:
        raise VitpruneError(f"--runtime onnxruntime: {missing}")
    if dtype not in DTYPES:
        raise VitpruneError(f"unknown dtype {dtype!r} (choose from: {', '.join(DTYPES)})")
    if dtype == "float16" and device.type != "cuda":
        raise VitpruneError("float16 timing needs a CUDA device (CPUs run it through slow fallbacks); use bfloat16")


def time_deployed(model: nn.Module, dense: nn.Module, *, batches: list[int], runtimes: list[str], dtype: str,
                  speed: SpeedConfig, device: torch.device) -> dict[str, Any]:
    """``model`` against ``dense`` at each of ``batches`` in each of ``runtimes`` (PyTorch in ``dtype`` on
    ``device``; ONNX Runtime on the CPU in float32, both exported and checked against PyTorch first), with
    ``speed``'s pairs and warm-up; returns ``{"timings": [...], "memory": {...}}``: one row per runtime and batch
    (speedup, quartiles, each side's median milliseconds per batch; or the ``error`` that kept a runtime from running
    the arm, such as an export onnxruntime does not reproduce) and the weights' bytes (and, on CUDA, the peak memory
    of a forward pass at the largest batch)."""
    model, dense = copy.deepcopy(model).eval(), copy.deepcopy(dense).eval()
    rows = []
    for runtime in runtimes:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                pair, row_dtype, row_device = _pair(model, dense, runtime, dtype, device, Path(tmp))
            except VitpruneError as exc:  # an export that fails is said in the table; the arm keeps its scores
                rows += [{"runtime": runtime, "batch": batch, "error": str(exc)} for batch in batches]
                continue
            for batch in batches:
                timing = compare_speed(*pair, batch_size=batch, device=row_device, dtype=_DTYPES[row_dtype],
                                       warmup=speed.warmup, pairs=speed.pairs, input_size=_input_size(model))
                rows.append({"runtime": runtime, "dtype": row_dtype, "batch": batch, "device": str(row_device),
                             "speedup": timing.speedup, "speedup_q1": timing.spread.q1,
                             "speedup_q3": timing.spread.q3, "ms": timing.a.spread.median,
                             "dense_ms": timing.b.spread.median})
    return {"timings": rows, "memory": _memory(model, device, dtype, max(batches))}


def _input_size(model: nn.Module) -> tuple[int, int, int]:
    return tuple(get_adapter(model).input_size)


def _pair(model: nn.Module, dense: nn.Module, runtime: str, dtype: str, device: torch.device,
          directory: Path) -> tuple[tuple[nn.Module, nn.Module], str, torch.device]:
    """The two models as ``runtime`` runs them, with the dtype and device they are timed in."""
    if runtime == "torch":
        return (model, dense), dtype, device
    paths = [directory / "arm.onnx", directory / "dense.onnx"]
    for net, path in zip((model, dense), paths):
        export_onnx(net, path)  # checked against PyTorch's outputs, or one line why not
    return (OnnxRuntimeModel(paths[0]), OnnxRuntimeModel(paths[1])), "float32", torch.device("cpu")


def _memory(model: nn.Module, device: torch.device, dtype: str, batch: int) -> dict[str, Any]:
    """The weights' bytes in ``dtype``, and on CUDA the peak allocated during one forward pass at ``batch``."""
    size = torch.tensor([], dtype=_DTYPES[dtype]).element_size()
    weights = sum(t.numel() for t in [*model.parameters(), *model.buffers()]) * size
    peak = None
    if device.type == "cuda":
        net = copy.deepcopy(model).to(device=device, dtype=_DTYPES[dtype])
        x = torch.randn(batch, *_input_size(model), device=device, dtype=_DTYPES[dtype])
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        with torch.inference_mode():
            net(x)
        torch.cuda.synchronize(device)
        peak = int(torch.cuda.max_memory_allocated(device))
    return {"weights_bytes": int(weights), "peak_bytes": peak, "peak_batch": batch if peak is not None else None}


__all__ = ["check_timing", "time_deployed"]
