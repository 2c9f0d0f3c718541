"""Paired statistics: a gap that two separate intervals hide, McNemar's agreement, seeds as a sample (and the
false verdicts a null simulation draws), Holm, and equivalence by a margin."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest, norm, ttest_1samp

from vitprune.measure.paired import (PairedDifference, _summary, decide, holm, judge, paired_difference,
                                     paired_metric_difference)


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
    # the t-test over the three seeds' differences (+5, -4, +5) says the same, and it is the larger p: it decides
    assert crossed.seed_p_greater == pytest.approx(ttest_1samp([5, -4, 5], 0, alternative="greater").pvalue)
    assert crossed.decided_by("greater") == "seeds" and crossed.p("greater") == crossed.seed_p_greater


def test_the_seed_level_tests_are_students():
    """Each seed-level p-value is the t-test of its hypothesis on the per-seed differences, the interval the t
    interval."""
    rows = [_arms(1000, 800, gain, 0) for gain in (30, 12, 21, 25)]  # +3.0, +1.2, +2.1, +2.5 points
    d = paired_difference(np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]), resamples=2000)
    per_seed = np.array([3.0, 1.2, 2.1, 2.5])
    assert d.seed_p_greater == pytest.approx(ttest_1samp(per_seed, 0, alternative="greater").pvalue)
    assert d.seed_p_less == pytest.approx(ttest_1samp(per_seed, 0, alternative="less").pvalue)
    assert d.seed_p_inferior == pytest.approx(ttest_1samp(per_seed, -1, alternative="greater").pvalue)
    assert d.seed_p_equivalent == pytest.approx(max(ttest_1samp(per_seed, -1, alternative="greater").pvalue,
                                                    ttest_1samp(per_seed, 1, alternative="less").pvalue))
    low, high = ttest_1samp(per_seed, 0).confidence_interval(0.95)
    assert (d.seed_low, d.seed_high) == pytest.approx((low, high))
    # one seed: the images are the only sample, and they decide
    single = paired_difference(rows[0][0], rows[0][1], resamples=2000)
    assert single.seed_p_greater is None and single.p("greater") == single.p_greater
    assert single.decided_by("greater") == "images"


def _null_rates(seeds: int, spread: float, draws: int = 400) -> tuple[int, int]:
    """How many of ``draws`` simulated comparisons with no effect get a directional verdict: by :func:`judge`, and
    by the image bootstrap alone at one-sided 0.05 (the claims page's rule before seeds were a sample). Each seed's
    true difference is drawn around 0 with SD ``spread`` points; 400 images, most of them scored alike by both arms
    (paired arms agree on most images)."""
    rng = np.random.default_rng(int(100 * spread) + seeds)
    verdicts = bootstrap_only = 0
    for k in range(draws):
        delta = rng.normal(0, spread, seeds)[:, None] / 100
        hard = rng.uniform(0.5, 1.0, 400)
        u = rng.random((seeds, 400))
        other = np.where(rng.random((seeds, 400)) < 0.2, rng.random((seeds, 400)), u)
        a, b = u < np.clip(hard + delta / 2, 0, 1), other < np.clip(hard - delta / 2, 0, 1)
        d = paired_difference(a, b, resamples=250, seed=k)
        verdicts += judge([d], ["better"])[0].verdict in ("holds", "does not hold")
        bootstrap_only += min(d.p_greater, d.p_less) < 0.05
    return verdicts, bootstrap_only


# Three seeds are the worst case (27 seed draws); the fast lane runs them at the widest spread, where the bootstrap
# alone fails, the slow one every spread and six seeds, the claims page's.
@pytest.mark.parametrize("seeds", [3, pytest.param(6, marks=pytest.mark.slow)])
@pytest.mark.parametrize("spread", [pytest.param(s, marks=pytest.mark.slow) for s in (0.0, 1.0, 2.0)] + [4.0])
def test_false_verdicts_stay_within_the_level(seeds, spread):
    """Null data (no effect on average over checkpoints, each checkpoint off by ``spread``): directional verdicts
    are not shown to exceed 5% (a one-sided binomial test on 400 draws; an exact 5% rate would pass it 99% of the
    time). The image bootstrap alone, at a spread of 4 points between three checkpoints, is shown to exceed it:
    what the seed-level test is for."""
    verdicts, bootstrap_only = _null_rates(seeds, spread)
    assert binomtest(verdicts, 400, 0.05, alternative="greater").pvalue > 0.01, verdicts / 400
    if seeds == 3 and spread == 4.0:
        assert binomtest(bootstrap_only, 400, 0.05, alternative="greater").pvalue < 0.001, bootstrap_only / 400


def test_beyond_the_margin_is_a_folded_test():
    """p_beyond tests "the difference lies within ±margin" at the margin on the estimate's side: with normal draws
    it is the folded normal's tail, about the one-sided share when the other side is far (doubling that share, the
    rule before, tested at half the level)."""
    se = 0.5
    draws = norm.ppf(np.linspace(0.5, 199_999.5, 200_000) / 200_000) * se
    for effect in (1.9, 1.2, 0.3, -1.9):
        got = _summary(effect, effect + draws, np.array([effect]), 1.0, 0.95, 100, 0.1).p_beyond
        far = abs(effect)
        assert got == pytest.approx(norm.sf((far - 1) / se) + norm.cdf((-far - 1) / se), abs=2e-4)
    near = _summary(1.9, 1.9 + draws, np.array([1.9]), 1.0, 0.95, 100, 0.1)
    assert near.p_beyond == pytest.approx(norm.sf(0.9 / se), abs=1e-3)  # the one-sided share, not twice it


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
    assert decide([at(0.02)], ["better"]) == ["holds"]
    assert decide([at(0.02), at(0.5), at(0.6)], ["better"] * 3) == ["inconclusive"] * 3
    # each direction at half the level: 0.03 is a significant gain one-sided, not a verdict two-sided
    assert decide([at(0.03)], ["better"]) == ["inconclusive"]


def test_a_judgement_names_the_test_that_decided():
    """A "does not hold" shows the p of the direction that decided it (B better), Holm-adjusted, not the claimed
    direction's."""
    a, b = _arms(1000, 800, 0, 40)  # B right on 40 more images
    worse, noise = paired_difference(a, b), paired_difference(*_arms(1000, 800, 5, 5))
    verdict, other = judge([worse, noise], ["better", "better"])
    assert (verdict.verdict, verdict.test, verdict.sample) == ("does not hold", "less", "images")
    # two-sided: the one-sided p doubled, then Holm over the two comparisons
    assert verdict.p == 2 * worse.p_less and verdict.p_holm == pytest.approx(min(1, 4 * worse.p_less))
    assert (other.verdict, other.test, other.p) == ("equivalent", "equivalent", noise.p_equivalent)


def test_equivalence_by_margin():
    same_a, same_b = _arms(4000, 3400, 6, 5)  # 0.025 points apart on 4,000 images
    d = paired_difference(same_a, same_b, resamples=2000)
    assert d.p_equivalent < 0.01 and -1 < d.low < d.high < 1
    assert decide([d], ["comparable"]) == ["holds"]
    assert decide([d], ["better"]) == ["equivalent"]
    far_a, far_b = _arms(4000, 3400, 160, 0)  # 4 points apart
    far = paired_difference(far_a, far_b, resamples=2000)
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
