"""Wall-clock speed of a model's forward pass, and paired A/B comparisons that resist drift.

A single latency figure on a shared CPU moves by several percent between runs (frequency scaling,
other processes, thermal state). :func:`measure_speed` therefore keeps every sample and reports
the median with its spread, and :func:`compare_speed` interleaves the two models so that drift hits
both equally and the per-pair ratio stays meaningful even when absolute times wander.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from rich.console import Console
from rich.progress import Progress
from torch import nn

from vitprune.device import resolve_device
from vitprune.errors import VitpruneError
from vitprune.measure.config import check_counts
from vitprune.measure.context import Context, collect_context, watch_other_load
from vitprune.measure.macs import resolve_input_size


@dataclass(frozen=True)
class Spread:
    """Median and spread of a list of samples (quartiles by linear interpolation)."""

    median: float
    q1: float
    q3: float
    min: float
    max: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Spread:
        """Summarise ``samples``."""
        q1, median, q3 = np.percentile(samples, [25, 50, 75]).tolist()
        return cls(median=median, q1=q1, q3=q3, min=min(samples), max=max(samples))

    @property
    def iqr(self) -> float:
        """Interquartile range."""
        return self.q3 - self.q1

    def fields(self, key: Callable[[str], str]) -> dict[str, float]:
        """The statistics as JSON fields, named by ``key`` from ``median``, ``q1``, ``q3``, ``min`` and ``max``."""
        return {key(stat): getattr(self, stat) for stat in ("median", "q1", "q3", "min", "max")}

    def describe(self, fmt: str) -> str:
        """``IQR q1-q3, min m, max M``, each number in format ``fmt``."""
        return f"IQR {self.q1:{fmt}}-{self.q3:{fmt}}, min {self.min:{fmt}}, max {self.max:{fmt}}"


class _Sampled:
    """A measurement repeated many times; the dataclass field named :attr:`_SAMPLES` holds the samples."""

    _SAMPLES: ClassVar[str]

    @property
    def spread(self) -> Spread:
        """Median and spread of the samples."""
        return Spread.of(getattr(self, self._SAMPLES))


@dataclass(frozen=True)
class SpeedResult(_Sampled):
    """Timings of repeated forward passes of one batch; times are milliseconds per batch."""

    _SAMPLES = "samples_ms"

    samples_ms: list[float]
    warmup: int
    context: Context
    #: Share of the machine's CPU time other processes used during the timed runs (see :class:`OtherLoad`).
    other_load: float | None = None

    @property
    def batch_size(self) -> int:
        """Images per forward pass."""
        return self.context.batch_size

    @property
    def latency_ms(self) -> float:
        """Median time of one forward pass (of the whole batch)."""
        return self.spread.median

    @property
    def throughput(self) -> float:
        """Images per second at the median time: ``batch_size / median``."""
        return self.batch_size / (self.latency_ms / 1e3)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; ``*_ms`` are per batch, ``throughput`` is images per second."""
        s = self.spread
        return {
            "latency_ms": s.median,
            **s.fields(lambda stat: f"{stat}_ms"),
            "iqr_ms": s.iqr,
            "throughput": self.throughput,
            "batch_size": self.batch_size,
            "repeats": len(self.samples_ms),
            "warmup": self.warmup,
            "samples_ms": list(self.samples_ms),
            "other_load": self.other_load,
            "context": self.context.to_dict(),
        }

    def summary(self) -> str:
        """One line: median with spread, throughput, and where it was measured."""
        s, c = self.spread, self.context
        other = "" if self.other_load is None else f"; other processes used {self.other_load:.0%} of the CPU"
        return (f"{s.median:.2f} ms median ({s.describe('.2f')}; {len(self.samples_ms)} runs), "
                f"{self.throughput:.1f} img/s at batch {c.batch_size}, {c.dtype} on {c.device_name} "
                f"({c.threads} threads{other})")

    def __str__(self) -> str:
        return self.summary()


@dataclass(frozen=True)
class Comparison(_Sampled):
    """Paired timings of model A and model B; ``speedup`` is how many times faster A is than B."""

    _SAMPLES = "ratios"

    a: SpeedResult
    b: SpeedResult
    #: Per pair, time of B / time of A (> 1: A is faster).
    ratios: list[float]

    @property
    def speedup(self) -> float:
        """Median over pairs of time(B) / time(A)."""
        return self.spread.median

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; ``speedup`` = median of time(B) / time(A) over pairs."""
        s = self.spread
        return {
            **s.fields(lambda stat: "speedup" if stat == "median" else f"speedup_{stat}"),
            "pairs": len(self.ratios),
            "ratios": list(self.ratios),
            "a": self.a.to_dict(),
            "b": self.b.to_dict(),
        }

    def summary(self) -> str:
        """One line: the speedup with its spread over pairs."""
        s = self.spread
        return f"speedup {s.median:.3f}x (time B / time A; {s.describe('.3f')}; {len(self.ratios)} alternating pairs)"

    def __str__(self) -> str:
        return self.summary()


def measure_speed(model: nn.Module, *, input_size: tuple[int, int, int] | None = None, batch_size: int = 1,
                  device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, warmup: int = 10,
                  repeats: int = 30, threads: int | None = None, progress: bool = False) -> SpeedResult:
    """Time ``repeats`` forward passes of a random batch after ``warmup`` untimed ones.

    Runs in eval mode under ``torch.inference_mode``. The model is moved to ``device`` and
    ``dtype`` in place (as ``nn.Module.to`` does) and stays there; its training mode is restored.
    ``input_size`` defaults to the model's own, which needs a supported ViT; pass it for any other
    module. ``threads`` sets torch's intra-op thread count for the measurement only. On CUDA each
    pass is timed with CUDA events; on CPU with ``time.perf_counter``.
    """
    dev = resolve_device(device)
    check_counts(warmup, batch_size=batch_size, repeats=repeats)
    x = _make_input(model, input_size, batch_size, dev, dtype)
    with _session([model], dev, dtype, threads) as flushed:
        context = collect_context(dev, dtype, batch_size, flush_denormal=flushed)
        with _progress(progress, "timing", warmup + repeats) as step:
            for _ in range(warmup):
                model(x)
                step()
            samples = []
            with watch_other_load() as other:
                for _ in _timed_loop(dev, repeats):
                    samples.append(_time_once(model, x, dev))
                    step()
    return SpeedResult(samples_ms=samples, warmup=warmup, context=context, other_load=other.share)


def compare_speed(model_a: nn.Module, model_b: nn.Module, *, input_size: tuple[int, int, int] | None = None,
                  batch_size: int = 1, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                  warmup: int = 10, pairs: int = 30, threads: int | None = None,
                  progress: bool = False) -> Comparison:
    """Time A and B alternately and report ``speedup`` = median over pairs of time(B) / time(A).

    Each pair runs both models once, A first in even pairs and B first in odd ones, so slow drift
    and any first-in-pair advantage affect both models equally. ``vitprune bench MODEL --vs OTHER``
    is ``compare_speed(MODEL, OTHER)``: a pruned MODEL against its original gives speedup > 1.
    Both models get the same input; ``input_size`` defaults to the models' own, which must agree.
    Other settings as in :func:`measure_speed`.
    """
    dev = resolve_device(device)
    check_counts(warmup, batch_size=batch_size, pairs=pairs)
    if input_size is None:
        size_a, size_b = resolve_input_size(model_a), resolve_input_size(model_b)
        if size_a != size_b:
            raise VitpruneError(f"cannot compare models with different inputs: {_fmt(size_a)} vs {_fmt(size_b)}")
    x = _make_input(model_a, input_size, batch_size, dev, dtype)
    models = (model_a, model_b)
    with _session(list(models), dev, dtype, threads) as flushed:
        context = collect_context(dev, dtype, batch_size, flush_denormal=flushed)
        samples: tuple[list[float], list[float]] = ([], [])
        with _progress(progress, "comparing", warmup + pairs) as step:
            for _ in range(warmup):
                model_a(x)
                model_b(x)
                step()
            with watch_other_load() as other:
                for i in _timed_loop(dev, pairs):
                    for k in ((0, 1) if i % 2 == 0 else (1, 0)):
                        samples[k].append(_time_once(models[k], x, dev))
                    step()
    ratios = [tb / ta for ta, tb in zip(*samples, strict=True)]
    a, b = (SpeedResult(samples[k], warmup, context, other.share) for k in (0, 1))
    return Comparison(a=a, b=b, ratios=ratios)


def _fmt(size: tuple[int, ...]) -> str:
    return "x".join(map(str, size))


def _make_input(model: nn.Module, input_size: tuple[int, int, int] | None, batch_size: int,
                dev: torch.device, dtype: torch.dtype) -> torch.Tensor:
    size = resolve_input_size(model, input_size)
    return torch.randn(batch_size, *size, generator=torch.Generator().manual_seed(0)).to(device=dev, dtype=dtype)


@contextlib.contextmanager
def _session(models: list[nn.Module], dev: torch.device, dtype: torch.dtype, threads: int | None) -> Iterator[bool]:
    """Threads, eval mode and inference mode for timing; yields whether denormals are flushed to zero.

    On CPU they are: arithmetic that underflows (GELU's erf far from zero, softmax tails) takes a slow
    microcode path, so without flushing a model's time depends on how many of its activations
    underflow, not only on its shape, and a fine-tuned model can look faster than its weights make it.
    Inference runtimes (oneDNN, ONNX Runtime) flush them too. The default is restored afterwards.
    """
    if threads is not None and threads < 1:
        raise VitpruneError(f"threads must be at least 1, got {threads}")
    training = [m.training for m in models]
    previous_threads = torch.get_num_threads()
    flushed = dev.type == "cpu" and torch.set_flush_denormal(True)
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        # Moved before inference_mode: parameters created inside it would become inference tensors.
        for m in models:
            m.to(device=dev, dtype=dtype).eval()
        cuda_scope = torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext()
        with cuda_scope, torch.inference_mode():
            yield flushed
    finally:
        if flushed:
            torch.set_flush_denormal(False)
        torch.set_num_threads(previous_threads)
        for m, was_training in zip(models, training, strict=True):
            m.train(was_training)


def _timed_loop(dev: torch.device, n: int) -> range:
    # Start the timed runs from a quiet state: no queued GPU work, no pending garbage collection.
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    gc.collect()
    return range(n)


def _time_once(model: nn.Module, x: torch.Tensor, dev: torch.device) -> float:
    """Milliseconds of one forward pass."""
    if dev.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        model(x)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    model(x)
    return (time.perf_counter() - t0) * 1e3


@contextlib.contextmanager
def _progress(enabled: bool, description: str, total: int) -> Iterator[Callable[[], None]]:
    if not enabled:
        yield lambda: None
        return
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)
