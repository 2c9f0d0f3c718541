"""The pick at one target: the fastest arm shown within the tolerance of the most accurate (``--objective speed``),
or the most accurate (``accuracy``), with its verdicts against the rest; arms off target take no part."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from vitprune.comparison import pick as pick_module
from vitprune.comparison.pick import choose
from vitprune.comparison.report import ArmResult
from vitprune.measure.paired import paired_difference

IMAGES = 2000


def _arm(name: str, right: list[range], speedup: float | None, met: bool | None = True
         ) -> tuple[ArmResult, np.ndarray]:
    """An arm right on the images of ``right`` (and on the 1,780 every arm gets right)."""
    scores = np.zeros(IMAGES, dtype=bool)
    for span in [range(1780), *right]:
        scores[list(span)] = True
    return ArmResult(name, name, "macs-0.6", "done", top1=100 * float(scores.mean()), speedup=speedup, met=met,
                     run_dir=name), scores


@pytest.fixture
def arms(monkeypatch):
    """Most accurate 90.5%; fast 0.3 points behind on 20 discordant images; fastest 1.5 behind on 30; an off-target
    arm as accurate as the first and faster than all; the dense control 0.5 points ahead on 50 discordant images."""
    built = [_arm("accurate", [range(1780, 1810)], 1.10),
             _arm("fast", [range(1780, 1797), range(1810, 1817)], 1.40),
             _arm("fastest", [], 2.00),
             _arm("off", [range(1780, 1795), range(1820, 1835)], 3.00, met=False)]
    control = _arm("dense", [range(1780, 1790), range(1840, 1870)], 1.0, met=None)
    scores = {arm.run_dir: correct for arm, correct in [*built, control]}
    # A tenth of the resamples: the rule is under test, not the p-values' last digit.
    monkeypatch.setattr(pick_module, "paired_difference", functools.partial(paired_difference, resamples=1000))
    return [arm for arm, _ in built], control[0], lambda arm: scores[arm.run_dir]


def test_speed_picks_the_faster_arm_within_the_tolerance_and_accuracy_the_more_accurate(arms):
    results, control, scores = arms
    fast = choose(results, control, scores, objective="speed", tolerance=1.0)
    # 0.3 points behind on 20 discordant images is shown within 1 point; 1.5 behind is not; the off-target arm is not
    # a candidate however fast.
    assert fast["arm"] == "fast" and fast["most_accurate"] == "accurate"
    assert fast["within_tolerance"] == ["accurate", "fast"]
    assert fast["why"] == ("fast is the fastest arm on target (1.40×) shown within 1 point of the most accurate, "
                           "accurate (90.50%, 1.10×)")
    slow = choose(results, control, scores, objective="accuracy", tolerance=1.0)
    assert slow["arm"] == "accurate" and slow["rule"].startswith("the most accurate arm on target")
    assert "fast is shown within 1 point of it at 1.40×" in slow["why"]
    # Against the rest: the accurate arm's 0.3-point lead over fast is within ±1 (equivalent), its 1.5 over fastest
    # significant (better), the dense control's 0.5-point lead over it neither shown nor excluded (inconclusive).
    verdicts = {v["b"]: v["verdict"] for v in slow["verdicts"]}
    assert verdicts == {"fast": "equivalent", "fastest": "better", "off": "equivalent", "dense": "inconclusive"}
    assert slow["indistinguishable"] == ["fast", "off", "dense"]


def test_no_tolerance_leaves_the_most_accurate_arm(arms):
    results, control, scores = arms
    assert choose(results, control, scores, objective="speed", tolerance=0.0)["arm"] == "accurate"


def test_without_speed_or_an_arm_on_target_the_pick_says_so(arms):
    results, control, scores = arms
    unmeasured = [ArmResult(**{**r.to_dict(), "speedup": None}) for r in results]
    chosen = choose(unmeasured, control, scores, objective="speed")
    assert chosen["arm"] == "accurate" and chosen["why"].endswith("speed was not measured")
    assert choose([r for r in results if not r.met], control, scores) is None
    with pytest.raises(ValueError, match="unknown objective"):
        choose(results, control, scores, objective="latency")
