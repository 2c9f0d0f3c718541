"""What a comparison reports: each arm's outcome and the whole answer, JSON-ready."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vitprune.config import JsonRecord
from vitprune.measure import CONVENTIONS
from vitprune.measure.target import MacTarget

#: Statuses after a run: an arm that ran and was scored, and one whose run stopped with a one-line reason (but for a
#: rate search that cannot reach the target: :data:`~vitprune.comparison.arms.UNREACHABLE`).
DONE, FAILED = "done", "failed"


@dataclass(frozen=True)
class Target:
    """What the arms aim at: a MAC target in the full convention (``"macs"``, a
    :class:`~vitprune.measure.MacTarget`: a share of the dense model's MACs such as 0.6, or a count such as 1.2G) or a
    speedup over the dense model measured on this machine (``"speedup"``, a factor such as 1.5)."""

    kind: str
    value: Any

    @classmethod
    def macs(cls, target: Any) -> Target:
        """A MAC target: ``target`` as :meth:`~vitprune.measure.MacTarget.parse` reads it."""
        return cls("macs", MacTarget.parse(target))

    @property
    def label(self) -> str:
        """Its name in paths, tables and the report's keys: ``macs-0.6``, ``macs-1200000000``, ``speedup-1.5``."""
        return f"macs-{self.value.to_json()}" if self.kind == "macs" else f"speedup-{self.value:g}"

    @classmethod
    def parse(cls, label: str) -> Target:
        """The target a :attr:`label` names."""
        kind, value = label.split("-", 1)
        return cls.macs(float(value)) if kind == "macs" else cls(kind, float(value))

    def describe(self) -> str:
        """As a heading says it: ``60% of the MACs``, ``1.2G MACs``, ``1.5× measured speedup``."""
        if self.kind == "speedup":
            return f"{self.value:g}× measured speedup"
        return f"{self.value.value:.0%} of the MACs" if self.value.share else f"{self.value} MACs"


@dataclass
class ArmResult(JsonRecord):
    """One arm's outcome: what it ran and scored, or why it did not run."""

    arm: str
    title: str
    #: The target's label (:attr:`Target.label`; ``None``: the dense control).
    target: str | None
    status: str
    #: Why it did not run or stopped, or where a scored arm landed off its target.
    reason: str | None = None
    steps: list[dict[str, Any]] | None = None
    #: Validation top-1 (%) and Wilson's 95% interval.
    top1: float | None = None
    interval: list[float] | None = None
    params: int | None = None
    #: Full-convention MACs per image, and as a share of the dense model's.
    macs: int | None = None
    macs_share: float | None = None
    #: The share of the dense MACs it was brought to: the target's, or for a speedup target the one its probes found.
    share: float | None = None
    #: On target: MACs within 1% of it, or the target speedup within the measured speedup's quartiles.
    met: bool | None = None
    #: Measured against the dense model in alternating pairs: median, quartiles.
    speedup: float | None = None
    speedup_q1: float | None = None
    speedup_q3: float | None = None
    #: Its final model timed as deployed against the dense model (:func:`~vitprune.comparison.timing.time_deployed`):
    #: one row per runtime and batch (speedup, quartiles, milliseconds per batch of each side); ``speedup`` above is
    #: the row of the first runtime at the speed batch. And its memory: the weights' bytes, the peak on CUDA.
    timings: list[dict[str, Any]] | None = None
    memory: dict[str, Any] | None = None
    #: Wall time of its run (selection, search and recovery; a speedup target's probes included).
    seconds: float | None = None
    #: A speedup target's probes: each MAC share tried (pruned, not recovered) and its measured speedup.
    probes: list[dict[str, Any]] | None = None
    run_dir: str | None = None
    #: One run's seed; an arm's seeds and its runs (one :class:`ArmResult` per seed, JSON form), of which the fields
    #: above are the combination (top-1: the mean over seeds with the two-way bootstrap's interval).
    seed: int | None = None
    seeds: list[int] | None = None
    runs: list[dict[str, Any]] | None = None


@dataclass
class CompareReport(JsonRecord):
    """What :func:`compare` found; ``run_dir/report.json`` holds its :meth:`to_dict`."""

    #: The starting checkpoint's name and the data, as the reproducing commands name them.
    model: str
    data: str
    budget: dict[str, Any]
    #: The targets' labels (:attr:`Target.label`), in the order they ran.
    targets: list[str]
    #: The dense model: top-1 (%), interval, params, MACs.
    dense: dict[str, Any]
    control: ArmResult
    arms: list[ArmResult]
    #: Registered methods no comparison runs, with why.
    left_out: dict[str, str]
    #: Per target (its label) the arm recommended (:func:`~vitprune.comparison.pick.choose`; ``None``: no arm on
    #: target): name, top-1, speedup, the objective and its rule, why it won, its verdicts against every other arm
    #: and the control, and the command that runs it alone.
    pick: dict[str, dict[str, Any] | None]
    #: Estimated before the run (its recovery and training from a measured step time) and measured.
    estimate_seconds: float
    seconds: float
    validation_images: int
    #: How the arms were timed (:class:`~vitprune.measure.SpeedConfig`'s fields) and where: device, dtype, threads.
    speed: dict[str, Any]
    #: The seeds every arm and the control ran under.
    seeds: list[int]
    mac_convention: str = CONVENTIONS["full"]
    run_dir: str = ""


__all__ = ["DONE", "FAILED", "ArmResult", "CompareReport", "Target"]
