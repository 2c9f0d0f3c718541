"""What measurement's settings are, without torch: the MAC conventions, how a pruned model is timed and how counts
are written; configs and the command line read them (:mod:`vitprune.lazy`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vitprune.config import setting
from vitprune.errors import VitpruneError

#: Counting conventions: ``full`` adds the attention matmuls to the linear/conv layers; ``tp`` is
#: torch-pruning's counter, whatever its hooks count (docs/measurement.md).
CONVENTIONS: dict[str, str] = {
    "full": "linear/conv layers + attention matmuls",
    "linear": "linear/conv layers only, no attention matmuls",
    "tp": ("torch-pruning's count_ops_and_params: linear/conv layers with biases, some norms and activations, "
           "attention matmuls in timm's attention modules only"),
}


@dataclass(frozen=True)
class SpeedConfig:
    """How a pruned model is timed against its original: one set of defaults for every command and pipeline.

    ``enabled=False`` skips the measurement (reports then hold ``None`` for speed). The CLI's
    ``--speed/--no-speed``, ``--speed-batch`` and ``--repeats`` are these fields.
    """

    enabled: bool = setting(True, flag="--speed/--no-speed",
                            help="Time the result against the original (alternating pairs).")
    batch_size: int = setting(16, flag="--speed-batch", min=1,
                              help="Batch of the speed measurement (1: latency; larger: throughput).")
    pairs: int = setting(20, flag="--repeats", min=3,
                         help="Timed runs (alternating pairs when two models are compared).")
    warmup: int = 3

    def validate(self) -> None:
        """One line for counts that cannot run (pipelines call it first, not after hours of earlier stages)."""
        check_counts(self.warmup, batch_size=self.batch_size, pairs=self.pairs)


#: Equivalence margin in top-1 points: two arms within it are "comparable" (two one-sided tests,
#: :mod:`vitprune.measure.paired`).
MARGIN = 1.0
#: Family-wise error rate of one claim's decisions.
ALPHA = 0.05


def check_counts(warmup: int, **positive: int) -> None:
    """A one-line error for a negative ``warmup`` or any of ``positive`` (named as the message says them) below 1."""
    if warmup < 0:
        raise VitpruneError(f"warmup must be at least 0, got {warmup}")
    for name, n in positive.items():
        if n < 1:
            raise VitpruneError(f"{name.replace('_', ' ')} must be at least 1, got {n}")


def format_count(n: float) -> str:
    """``4241218560`` -> ``'4.24G'``: a count with an SI suffix, three significant digits."""
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:g}"


#: Cores other processes may keep busy beyond those a timing leaves idle before the timing is called contended: a
#: quiet machine's background stays below it.
BUSY_CORES = 0.1


def busy_note(result: dict[str, Any]) -> str:
    """What a timing (a :class:`~vitprune.measure.SpeedResult`'s JSON form) should carry next to its figure: a
    warning when other processes wanted more of the CPU than the cores it left idle (its threads competed with
    them, so the figure is not to be trusted); empty otherwise, or where the load is unknown."""
    share, context = result.get("other_load"), result.get("context", {})
    if share is None or context.get("device") != "cpu" or not context.get("cpu_count"):
        return ""
    cores, idle = share * context["cpu_count"], max(0, context["cpu_count"] - context["threads"])
    if cores <= idle + BUSY_CORES:
        return ""
    return (f"busy machine: other processes kept {cores:.1f} of {context['cpu_count']} cores busy while this ran "
            f"{context['threads']} threads; not to be trusted")


__all__ = ["ALPHA", "BUSY_CORES", "CONVENTIONS", "MARGIN", "SpeedConfig", "busy_note", "check_counts", "format_count"]
