"""What a comparison is asked, without torch: its targets, its budget, its arms and its seed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vitprune.comparison.budget import BUDGETS, CompareBudget, get_budget
from vitprune.comparison.report import Target
from vitprune.config import SEED_HELP, setting
from vitprune.errors import VitpruneError
from vitprune.measure.config import MARGIN, SpeedConfig
from vitprune.measure.target import SPELLING, MacTarget

def points(value: float) -> str:
    """``value`` top-1 points in words: "1 point", "0.5 points"."""
    return f"{value:g} point{'' if value == 1 else 's'}"


#: What each objective maximises, as the report states its rule (:func:`~vitprune.comparison.pick.choose`;
#: ``margin``: :func:`points`).
OBJECTIVES = {
    "speed": "the fastest arm on target (median measured speedup) whose top-1 is shown to be not worse than the most "
             "accurate arm's by more than {margin} (one-sided paired bootstrap, Holm over the arms "
             "tested, alpha {alpha:g})",
    "accuracy": "the most accurate arm on target (top-1; ties: the faster)",
}
#: Runtimes an arm can be timed in, and the dtypes of its PyTorch timings (:mod:`vitprune.comparison.timing`).
RUNTIMES = ("torch", "onnxruntime")
DTYPES = ("float32", "bfloat16", "float16")
from vitprune.training.config import TRAINING_HELP


@dataclass
class CompareConfig:
    """One comparison: every arm (``arms``: those named; default every one) at each MAC target (``target_macs``, full
    convention) and measured speedup (``speedup``), on a :data:`~vitprune.comparison.budget.BUDGETS` budget (or a
    :class:`~vitprune.comparison.budget.CompareBudget`; ``epochs`` and ``train_images`` change its recovery's length
    and its training subset), everything drawn under ``seed``. ``model`` and ``data`` are how the commands that
    reproduce an arm name the model and the data."""

    target_macs: list[MacTarget] = setting(default_factory=list, parse=MacTarget.parse, aliases=("--macs",),
                                           help=f"MACs per image to reach (full convention): {SPELLING}; several, "
                                                "comma-separated.")
    speedup: list[float] = setting(default_factory=list, help="Speedups over MODEL to reach, measured on this "
                                                                  "machine (--speed-batch, --repeats), e.g. 1.5; "
                                                                  "several, comma-separated.")
    budget: str | CompareBudget = setting("quick", choices=BUDGETS, help=(
        "quick (1 recovery epoch on 2,000 images; minutes on a CPU for a small model), standard (10 epochs on every "
        "image) or paper (the HetDPT paper's 400-epoch DeiT recipe, each search at its paper's settings)."))
    epochs: int | None = setting(None, min=1, help=TRAINING_HELP["epochs"])
    train_images: int | None = setting(None, min=1, help="Class-balanced training images every arm trains on, drawn "
                                                         "with --seed (default: the budget's; quick 2,000, the others "
                                                         "all).")
    arms: list[str] | None = setting(None, help="Arms to run, comma-separated (default: every one; docs/compare.md "
                                                "lists them).")
    time_batches: list[int] = setting(default_factory=lambda: [1], help=(
        "Batches each arm's final model is also timed at against the dense model, besides --speed-batch (the pick's "
        "and a speedup target's); 1: latency. Comma-separated."))
    runtime: list[str] = setting(default_factory=lambda: ["torch"], help=(
        "Runtimes each arm is timed in: torch, onnxruntime (each arm exported and checked against PyTorch first; "
        "float32 on the CPU); comma-separated, the first the pick's."))
    dtype: str = setting("float32", choices=DTYPES, help="Dtype of the PyTorch timings: float32, bfloat16, or float16 "
                                                         "(CUDA only).")
    objective: str = setting("speed", choices=OBJECTIVES, help=(
        "What the recommendation optimises: speed (the fastest arm on target shown within --tolerance points of the "
        "most accurate) or accuracy (the most accurate, and the speed that costs)."))
    tolerance: float = setting(MARGIN, min=0, help="Top-1 points an arm may lose to the most accurate one and still "
                                                      "be picked for its speed (a one-sided paired test).")
    seed: int = setting(0, help=SEED_HELP)
    seeds: list[int] | None = setting(None, help=(
        "Seeds every arm and the control run under, comma-separated, e.g. 0,1,2 (default: --seed alone on quick; "
        "--seed and the next two on standard and paper): each draws the training subset and every step's "
        "randomness; the verdicts resample seeds and images."))
    model: str = "MODEL"
    data: str = "DATA"

    def __post_init__(self) -> None:
        listed = [self.target_macs] if isinstance(self.target_macs, (int, float, str, MacTarget)) else self.target_macs
        self.target_macs = [MacTarget.parse(target) for target in listed]
        self.speedup = [self.speedup] if isinstance(self.speedup, (int, float)) else list(self.speedup)
        self.time_batches = [self.time_batches] if isinstance(self.time_batches, int) else list(self.time_batches)
        self.runtime = [self.runtime] if isinstance(self.runtime, str) else list(self.runtime)
        if isinstance(self.seeds, int):
            self.seeds = [self.seeds]

    def seed_list(self) -> list[int]:
        """The seeds every arm runs under: :attr:`seeds`, else the budget's count from :attr:`seed` on; one line for
        none or a repeated one."""
        seeds = list(self.seeds) if self.seeds is not None else [
            self.seed + i for i in range(self.resolved_budget().seeds)]
        if not seeds or len(set(seeds)) != len(seeds):
            raise VitpruneError(f"--seeds needs at least one seed, each once; got {seeds}")
        return seeds

    def batches(self, speed: SpeedConfig) -> list[int]:
        """Every batch the arms are timed at: ``speed``'s (the pick's) and :attr:`time_batches`, smallest first."""
        return sorted({speed.batch_size, *self.time_batches})

    def resolved_budget(self) -> CompareBudget:
        """The budget, its recovery's epochs and its training images changed where given."""
        if isinstance(self.budget, CompareBudget):
            return self.budget
        return get_budget(self.budget, epochs=self.epochs, train_images=self.train_images)


def check_targets(macs: list[Any] | Any = (), speedups: list[float] | float = (),
                  speed: SpeedConfig = SpeedConfig()) -> list[Target]:
    """The targets, MAC targets (each once, in the order given) then speedups (smallest first); one line for a MAC
    target :meth:`~vitprune.measure.MacTarget.parse` refuses, a speedup not above 1, none at all, or a speedup target
    without the speed measurement."""
    def listed(value: Any) -> list[Any]:
        return [] if value is None else [value] if isinstance(value, (int, float, str)) else list(value)

    targets = list(dict.fromkeys(Target.macs(value) for value in listed(macs)))
    speedups = sorted({float(v) for v in listed(speedups)})
    if not targets and not speedups:
        raise VitpruneError(f"give at least one target: --target-macs ({SPELLING}) or --speedup (a measured speedup "
                            "such as 1.5)")
    for factor in speedups:
        if not factor > 1:
            raise VitpruneError(f"a speedup target is a factor above 1, such as 1.5; got {factor:g}")
    speed.validate()
    if speedups and not speed.enabled:
        raise VitpruneError("a speedup target is measured: drop --no-speed")
    return [*targets, *(Target("speedup", factor) for factor in speedups)]


__all__ = ["DTYPES", "OBJECTIVES", "RUNTIMES", "CompareConfig", "check_targets", "points"]
