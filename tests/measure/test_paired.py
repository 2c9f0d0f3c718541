"""Paired statistics: a gap that two separate intervals hide, McNemar's agreement, seeds as a sample, Holm, and
equivalence by a margin."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from vitprune.measure.paired import PairedDifference, decide, holm, paired_difference, paired_metric_difference


def _arms(images: int, both: int, only_a: int, only_b: int) -> tuple[np.ndarray, np.ndarray]:
    """Correctness of two arms on ``images`` images: ``both`` right for both, then ``only_a``, then ``only_b``."""
    a, b = np.zeros(images, bool), np.zeros(images, bool)
    a[:both + only_a] = True
    b[:both] = True
    b[both + only_a:both + only_a + only_b] = True
    return a, b


def _unpaired_apart(a: np.ndarray, b: np.ndarray) -> bool:
    """The rule the claims page used before: each arm's 95% binomial interval, apart or not."""
    def interval(x: np.ndarray) -> tuple[float, float]:
        p = x.mean()
        half = 1.96 * math.sqrt(p * (1 - p) / len(x))
        return p - half, p + half
    (la, ha), (lb, hb) = interval(a), interval(b)
    return la > hb or ha < lb


def test_a_paired_gap_that_separate_intervals_miss():
    a, b = _arms(1000, 850, 20, 0)  # A right on every image B gets right, and on 20 more
    assert not _unpaired_apart(a, b)
    d = paired_difference(a, b)
    assert d.effect == pytest.approx(2.0)
    assert d.low > 0 and d.p_greater < 0.001
    assert decide([d], ["better"]) == ["holds"]
    assert d.discordant == pytest.approx(0.02)


# One case in the fast lane (2 s each: bootstrap resamples).
@pytest.mark.parametrize(("only_a", "only_b"), [(25, 10), pytest.param(40, 22, marks=pytest.mark.slow),
                                                pytest.param(12, 12, marks=pytest.mark.slow)])
def test_one_seed_agrees_with_mcnemar(only_a, only_b):
    """With one seed the bootstrap is McNemar's test in another form: the discordant images decide."""
    a, b = _arms(2000, 1600, only_a, only_b)
    d = paired_difference(a, b, resamples=20_000)
    exact = binomtest(only_a, only_a + only_b, 0.5, alternative="greater").pvalue
    assert d.effect == pytest.approx(100 * (only_a - only_b) / 2000)
    assert d.p_greater == pytest.approx(exact, rel=0.35, abs=0.004)


def test_a_seed_that_disagrees_is_not_averaged_away():
    """Per seed +5, -4 and +5 points: the images alone would call it, the seeds do not."""
    rows = [_arms(1000, 800, gain, 0) if gain > 0 else _arms(1000, 800, 0, -gain)
            for gain in (50, -40, 50)]
    a, b = np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])
    pooled = paired_difference(a.reshape(1, -1), b.reshape(1, -1))
    crossed = paired_difference(a, b)
    assert pooled.effect == crossed.effect == pytest.approx(2.0)
    assert pooled.p_greater < 0.001
    assert crossed.p_greater > 0.1 and crossed.low < 0
    assert decide([crossed], ["better"]) == ["inconclusive"]


def test_seeds_that_agree_keep_their_resolution():
    a, b = _arms(1000, 850, 15, 0)
    d = paired_difference(np.stack([a] * 3), np.stack([b] * 3))
    assert d.effect == pytest.approx(1.5) and d.p_greater < 0.001 and d.seeds == 3 and d.images == 1000


def test_holm():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5]) == [0.5]
    assert holm([0.6, 0.6]) == [1.0, 1.0]


def test_holm_turns_a_lone_significance_into_none():
    """Three comparisons at p 0.03, 0.5, 0.6: alone the first holds, in a family of three it does not."""
    def at(p: float):
        return PairedDifference(
            effect=1.0, low=0.1, high=2.0, p_greater=p, p_less=1 - p, p_equivalent=1.0, p_beyond=1.0, margin=1.0,
            seeds=1, images=1000, discordant=0.01)
    assert decide([at(0.03)], ["better"]) == ["holds"]
    assert decide([at(0.03), at(0.5), at(0.6)], ["better"] * 3) == ["inconclusive"] * 3


def test_equivalence_by_margin():
    same_a, same_b = _arms(4000, 3400, 6, 5)  # 0.025 points apart on 4,000 images
    d = paired_difference(same_a, same_b)
    assert d.p_equivalent < 0.01 and -1 < d.low < d.high < 1
    assert decide([d], ["comparable"]) == ["holds"]
    assert decide([d], ["better"]) == ["equivalent"]
    far_a, far_b = _arms(4000, 3400, 160, 0)  # 4 points apart
    far = paired_difference(far_a, far_b)
    assert decide([far], ["comparable"]) == ["does not hold"]
    # too few images to tell either way: neither equivalent nor different
    few_a, few_b = _arms(100, 80, 2, 1)
    assert decide([paired_difference(few_a, few_b)], ["comparable"]) == ["inconclusive"]


def test_the_bootstrap_is_reproducible_and_checks_shapes():
    a, b = _arms(500, 400, 10, 5)
    assert paired_difference(a, b) == paired_difference(a, b)
    with pytest.raises(ValueError, match="same seeds and images"):
        paired_difference(a, b[:-1])
    with pytest.raises(ValueError, match="unknown comparison kind"):
        decide([paired_difference(a, b)], ["worse"])


def _ratio(counts: np.ndarray) -> np.ndarray:
    return 100 * counts[..., 0] / counts[..., 1]


def test_a_mean_written_as_counts_gives_the_same_bootstrap():
    """Counts [correct, 1] and their ratio are the mean: the metric version draws the very same distribution."""
    rng = np.random.default_rng(4)
    a, b = rng.random((3, 300)) < 0.8, rng.random((3, 300)) < 0.7
    as_counts = [np.stack([x, np.ones_like(x)], axis=2) for x in (a, b)]
    plain = paired_difference(a, b, resamples=3000)
    metric = paired_metric_difference(*as_counts, _ratio, resamples=3000)
    for name in ("effect", "low", "high", "discordant"):
        assert getattr(metric, name) == pytest.approx(getattr(plain, name), abs=1e-9)
    # A draw that lands exactly on 0 or on the margin may fall either side of it by rounding: a few in 3,000.
    for name in ("p_greater", "p_less", "p_equivalent", "p_beyond"):
        assert getattr(metric, name) == pytest.approx(getattr(plain, name), abs=2e-3)


def test_a_ratio_of_sums_is_not_a_mean_of_ratios():
    """mIoU-like scores weigh images by their counts: arm A wins one large image and loses two small ones, and the
    effect is the difference of the summed ratios (A: 110/130 vs B: 102/130), not of per-image ratios."""
    a = np.array([[[100, 100], [5, 15], [5, 15]]], dtype=float)
    b = np.array([[[90, 100], [6, 15], [6, 15]]], dtype=float)
    result = paired_metric_difference(a, b, _ratio, resamples=2000)
    assert result.effect == pytest.approx(100 * (110 - 102) / 130)
    assert (result.seeds, result.images, result.discordant) == (1, 3, 1.0)
    with pytest.raises(ValueError, match=r"\[seeds, images, counts\]"):
        paired_metric_difference(a[0], b[0], _ratio)
