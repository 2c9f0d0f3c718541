"""Which arm a comparison recommends at one target, decided by a rule fixed before the run.

Matching MACs favours the methods whose MAC savings do not all turn into speed (token pruning keeps every weight), so
the most accurate arm is not what a user deploys for. Under the ``speed`` objective the pick is the fastest arm on
target whose top-1 is shown to be *not worse* than the most accurate arm's by more than the tolerance: a one-sided
paired test of "worse by the tolerance or more" (:meth:`~vitprune.measure.paired.PairedDifference.p`
``("inferior")``: over images, and over seeds too where there are several), Holm-corrected over the arms tested, at
:data:`~vitprune.measure.paired.ALPHA`. Under ``accuracy`` it is the most accurate arm, with the speed that costs.
Either way the pick is then compared with every other scored arm and the dense control
(:func:`~vitprune.measure.paired.decide`, Holm within the target): *better* or *worse* (two-sided), *equivalent*
(within the tolerance) or *inconclusive*.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vitprune.comparison.config import OBJECTIVES, points
from vitprune.comparison.report import ArmResult
from vitprune.measure.config import ALPHA, MARGIN
from vitprune.measure.paired import decide, holm, paired_difference

#: :func:`~vitprune.measure.paired.decide`'s verdicts as the pick's against another arm.
_VERDICTS = {"holds": "better", "does not hold": "worse", "equivalent": "equivalent", "inconclusive": "inconclusive"}


def _speed(arm: ArmResult) -> float:
    return arm.speedup if arm.speedup is not None else 0.0


def choose(arms: list[ArmResult], control: ArmResult | None, scores: Callable[[ArmResult], np.ndarray], *,
         objective: str = "speed", tolerance: float = MARGIN) -> dict | None:
    """The pick among ``arms`` (one target's scored arms; those off target take no part in the choice) by
    ``objective``, with its rule, the one line on why it won, the arms shown within ``tolerance`` points of the
    most accurate, and its verdict against every other arm and ``control`` (``scores``: an arm's per-image
    correctness, ``[images]`` or ``[seeds, images]``). ``None`` where no arm is on target."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r} (choose from: {', '.join(OBJECTIVES)})")
    met = [arm for arm in arms if arm.met]
    if not met:
        return None
    best = max(met, key=lambda arm: (arm.top1, _speed(arm)))
    others = [arm for arm in met if arm is not best]
    tests = [paired_difference(scores(arm), scores(best), margin=tolerance) for arm in others]
    adjusted = holm([test.p("inferior") for test in tests])
    within = [best, *(arm for arm, p in zip(others, adjusted) if p < ALPHA)]
    fastest = max(within, key=lambda arm: (_speed(arm), arm.top1))
    measured = any(arm.speedup is not None for arm in met)
    chosen = fastest if objective == "speed" and measured else best
    verdicts = _verdicts(chosen, [arm for arm in arms if arm is not chosen], control, scores, tolerance)
    return {
        "arm": chosen.arm, "top1": chosen.top1, "speedup": chosen.speedup, "macs_share": chosen.macs_share,
        "objective": objective, "tolerance": tolerance,
        "rule": OBJECTIVES[objective].format(margin=points(tolerance), alpha=ALPHA),
        "why": _why(chosen, best, fastest, objective, tolerance, measured),
        "most_accurate": best.arm,
        "within_tolerance": [arm.arm for arm in within],
        "non_inferiority": [{"arm": arm.arm, "p_inferior": test.p("inferior"), "p_holm": p}
                            for arm, test, p in zip(others, tests, adjusted)],
        "indistinguishable": [v["b"] for v in verdicts if v["verdict"] in ("equivalent", "inconclusive")],
        "verdicts": verdicts,
    }


def _verdicts(chosen: ArmResult, others: list[ArmResult], control: ArmResult | None,
              scores: Callable[[ArmResult], np.ndarray], tolerance: float) -> list[dict]:
    """``chosen`` against each of ``others`` and the control, paired image by image (and seed by seed), Holm within
    the target."""
    against = [*others, *([control] if control is not None else [])]
    differences = [paired_difference(scores(chosen), scores(other), margin=tolerance) for other in against]
    verdicts = decide(differences, ["better"] * len(differences))
    return [{"a": chosen.arm, "b": other.arm, "verdict": _VERDICTS[verdict], **difference.to_dict()}
            for other, difference, verdict in zip(against, differences, verdicts)]


def _why(chosen: ArmResult, best: ArmResult, fastest: ArmResult, objective: str, tolerance: float,
         measured: bool) -> str:
    """One line: why ``chosen`` won."""
    margin = points(tolerance)
    if not measured:
        return f"{best.arm} is the most accurate arm on target ({best.top1:.2f}%); speed was not measured"
    if objective == "accuracy":
        if fastest is best:
            return (f"{best.arm} is the most accurate arm on target ({best.top1:.2f}%) and no faster arm is shown "
                    f"within {margin} of it")
        return (f"{best.arm} is the most accurate arm on target ({best.top1:.2f}%, {_speed(best):.2f}×); "
                f"{fastest.arm} is shown within {margin} of it at {_speed(fastest):.2f}×")
    if chosen is best:
        return (f"{best.arm} is the most accurate arm on target ({best.top1:.2f}%, {_speed(best):.2f}×) and no faster "
                f"arm is shown within {margin} of it")
    return (f"{chosen.arm} is the fastest arm on target ({_speed(chosen):.2f}×) shown within {margin} of "
            f"the most accurate, {best.arm} ({best.top1:.2f}%, {_speed(best):.2f}×)")


__all__ = ["choose"]
