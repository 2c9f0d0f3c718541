"""Paired statistics for accuracy comparisons: two models scored on the same images, under the same seeds.

Two arms scored on the same validation images are compared image by image: an image both get right (or both
wrong) says nothing about their difference, so a paired test sees a gap that two separate intervals hide. When
the arms are also run under several seeds (a seed picks the starting checkpoint, the fine-tune's images, a random
selection), seeds are a second sample: :func:`paired_difference` resamples images and seeds independently (the
two-way "pigeonhole" bootstrap of Owen, 2007, for crossed random effects). scipy's ``bootstrap`` resamples one
axis only, which would treat three seeds' results on one image as independent. With one seed it is a plain paired
bootstrap over images, which agrees with McNemar's test on the discordant images.

The bootstrap's seed axis is anti-conservative with few seeds: with three, the 27 seed draws agree whenever the
seeds agree in sign, and the image noise alone then sets the p-value, so an effect that varies between checkpoints
around zero "holds" far more often than the level says. A verdict about the method, not about these checkpoints,
also needs the seeds as the sample: every difference carries a seed-level t-test on the per-seed differences (a
paired t over seeds), and a test *rejects* only when both reject (:meth:`PairedDifference.p`: the larger p
decides). tests/measure/test_paired.py simulates null data at seed spreads of 0 to 4 points and checks the false
verdicts stay within the level.

Decisions within one claim are corrected for the number of comparisons with Holm's step-down method
(:func:`holm`). A directional verdict is a two-sided test at the level (each direction at half of it), so the 95%
intervals of a verdict exclude 0 on its side; "comparable" is decided by an equivalence margin fixed in advance
with two one-sided tests, not by overlapping intervals.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from vitprune.config import JsonRecord
from vitprune.measure.config import ALPHA, MARGIN



@dataclass(frozen=True)
class PairedDifference(JsonRecord):
    """Top-1 (or another score) of arm A minus arm B in points, with its bootstrap distribution's summaries and the
    seed-level t-test's.

    ``low`` and ``high`` bound the two-sided ``level`` interval. ``p_greater`` is the one-sided p-value of
    "A is not better" (the share of resampled differences at or below 0), ``p_less`` of "A is not worse",
    ``p_equivalent`` the two one-sided tests' p-value of "the difference lies outside ±``margin``", ``p_beyond``
    the p-value of "it lies within" (a folded test at the margin on the estimate's side: the share of resampled
    differences, shifted to centre there, at least as far from 0 as the estimate), ``p_inferior`` the one-sided
    p-value of "A is worse than B by the margin or more" (a small one shows A non-inferior to B).

    The ``seed_*`` fields are the same tests over the per-seed differences (Student's t, ``seeds - 1`` degrees of
    freedom) and the t interval; ``None`` with one seed, where the images are the only sample.
    """

    effect: float
    low: float
    high: float
    p_greater: float
    p_less: float
    p_equivalent: float
    p_beyond: float
    margin: float
    seeds: int
    images: int
    discordant: float
    #: A record stored before it was kept reads as not shown.
    p_inferior: float = 1.0
    seed_low: float | None = None
    seed_high: float | None = None
    seed_p_greater: float | None = None
    seed_p_less: float | None = None
    seed_p_equivalent: float | None = None
    seed_p_beyond: float | None = None
    seed_p_inferior: float | None = None

    def p(self, test: str) -> float:
        """The deciding p-value of ``test`` (``greater``, ``less``, ``equivalent``, ``beyond`` or ``inferior``):
        the larger of the image-level bootstrap's and the seed-level t-test's, so a rejection needs both (with one
        seed, the bootstrap's)."""
        return max(getattr(self, f"p_{test}"), self.seed_p(test))

    def seed_p(self, test: str) -> float:
        """The seed-level t-test's p-value of ``test`` (0 with one seed: it never decides then)."""
        value = getattr(self, f"seed_p_{test}")
        return 0.0 if value is None else value

    def decided_by(self, test: str) -> str:
        """Which sample decides ``test``: ``"seeds"`` where the t-test's p is the larger, else ``"images"``."""
        return "seeds" if self.seed_p(test) > getattr(self, f"p_{test}") else "images"


def paired_difference(a: np.ndarray, b: np.ndarray, *, margin: float = MARGIN, level: float = 0.95,
                      resamples: int = 10_000, seed: int = 0) -> PairedDifference:
    """Compare two arms' per-image correctness ``a`` and ``b``, each ``[seeds, images]`` (or ``[images]``), paired on
    both axes: row ``s`` of both comes from the same seed, column ``i`` from the same image.

    The difference's distribution is estimated by resampling seeds and images independently with replacement
    (``resamples`` times, generator seeded by ``seed``, so the result is reproducible). p-values count the
    resampled differences beyond the null value, with the usual +1 so none is 0.
    """
    a, b = np.atleast_2d(np.asarray(a, dtype=np.float64)), np.atleast_2d(np.asarray(b, dtype=np.float64))
    if a.shape != b.shape:
        raise ValueError(f"paired arms need the same seeds and images, got {a.shape} and {b.shape}")
    diff = 100 * (a - b)
    seeds, images = diff.shape
    draws = np.empty(resamples)
    # weights form: the mean over a resample is w_seeds @ diff @ w_images / (seeds * images)
    for chunk, w_seeds, w_images in _weights(seeds, images, resamples, seed):
        draws[chunk] = np.einsum("bs,si,bi->b", w_seeds, diff, w_images) / (seeds * images)
    return _summary(float(diff.mean()), draws, diff.mean(axis=1), margin, level, images, float(np.mean(a != b)))


def paired_metric_difference(a: np.ndarray, b: np.ndarray, metric: Callable[[np.ndarray], np.ndarray], *,
                             margin: float = MARGIN, level: float = 0.95, resamples: int = 10_000,
                             seed: int = 0) -> PairedDifference:
    """:func:`paired_difference` for a score that is not a mean over images but a function of counts summed over
    them, as mIoU is (each class's pixels of intersection and of union, summed over the set, then the ratio's mean
    over classes).

    ``a`` and ``b`` are ``[seeds, images, counts]``; ``metric`` maps summed counts ``[..., counts]`` to the score in
    points ``[...]``. An arm's score is the mean over seeds of ``metric`` of its images' summed counts; a resample
    draws seeds and images as :func:`paired_difference` does (the same draws for the same ``seed``, so a mean
    written as counts ``[correct, 1]`` gives its very distribution) and sums each drawn image's counts as often as
    it was drawn. ``discordant`` is the share of images whose counts differ.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 3:
        raise ValueError(f"paired arms need [seeds, images, counts] of one shape, got {a.shape} and {b.shape}")

    def scores(arm: np.ndarray) -> list[Callable[[np.ndarray], np.ndarray]]:
        return [lambda w, counts=counts: metric(w @ counts) for counts in arm]

    return paired_weighted_difference(scores(a), scores(b), a.shape[1], margin=margin, level=level,
                                      resamples=resamples, seed=seed,
                                      discordant=float(np.mean((a != b).any(axis=2))))


def paired_weighted_difference(a: Sequence[Callable[[np.ndarray], np.ndarray]],
                               b: Sequence[Callable[[np.ndarray], np.ndarray]], images: int, *,
                               discordant: float, margin: float = MARGIN, level: float = 0.95,
                               resamples: int = 10_000, seed: int = 0) -> PairedDifference:
    """:func:`paired_difference` for any score of a weighted image set, as COCO's box mAP is (it ranks detections
    across the whole set, so it is neither a mean over images nor a function of summed counts).

    ``a[s](w)`` is arm A's score in points under seed ``s`` with its ``images`` validation images weighted by each
    row of ``w`` ``[n, images]`` (how often a resample drew each image; ones: the set itself), ``[n]`` scores; a
    resample draws seeds and images as :func:`paired_difference` does (the same draws for the same ``seed``), the
    same images for both arms and every seed. ``discordant`` is the share of images on which the arms differ, as the
    score's caller defines it.
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"paired arms need the same seeds, got {len(a)} and {len(b)}")
    seeds = len(a)
    ones = np.ones((1, images))
    by_seed = np.array([float(a[s](ones)[0] - b[s](ones)[0]) for s in range(seeds)])
    draws = np.empty(resamples)
    for chunk, w_seeds, w_images in _weights(seeds, images, resamples, seed):
        per_seed = np.stack([a[s](w_images) - b[s](w_images) for s in range(seeds)], axis=1)
        draws[chunk] = np.einsum("bs,bs->b", w_seeds, per_seed) / seeds
    return _summary(float(np.mean(by_seed)), draws, by_seed, margin, level, images, discordant)


def _weights(seeds: int, images: int, resamples: int, seed: int
             ) -> Iterator[tuple[slice, np.ndarray, np.ndarray]]:
    """The two-way bootstrap's draws as weights (how often each seed and each image is drawn), in chunks that bound
    memory: ``(chunk, w_seeds [n, seeds], w_images [n, images])``."""
    rng = np.random.default_rng(seed)
    for start in range(0, resamples, 1000):
        n = min(1000, resamples - start)
        w_seeds = rng.multinomial(seeds, np.full(seeds, 1 / seeds), size=n).astype(np.float64)
        w_images = rng.multinomial(images, np.full(images, 1 / images), size=n).astype(np.float64)
        yield slice(start, start + n), w_seeds, w_images


def _summary(effect: float, draws: np.ndarray, by_seed: np.ndarray, margin: float, level: float, images: int,
             discordant: float) -> PairedDifference:
    """The interval and p-values of ``draws``: resampled differences beyond the null value, counted with the usual
    +1 so none is 0; and the seed-level tests of ``by_seed`` (each seed's difference)."""
    resamples = len(draws)
    tail = (1 - level) / 2
    low, high = np.quantile(draws, [tail, 1 - tail])

    def p(count: int) -> float:
        return float((count + 1) / (resamples + 1))

    below, above = p(int(np.sum(draws <= -margin))), p(int(np.sum(draws >= margin)))
    # Folded at the margin on the estimate's side: under "the difference is exactly the margin", how often is an
    # estimate at least as far from 0 as this one? (Doubling the one-sided share would test at half the level.)
    shifted = draws - effect + math.copysign(margin, effect)
    beyond = p(int(np.sum(np.abs(shifted) >= abs(effect))))
    return PairedDifference(effect=effect, low=float(low), high=float(high),
                            p_greater=p(int(np.sum(draws <= 0))), p_less=p(int(np.sum(draws >= 0))),
                            p_equivalent=max(below, above), p_beyond=beyond, margin=margin, seeds=len(by_seed),
                            images=images, discordant=discordant, p_inferior=below,
                            **_seed_tests(np.asarray(by_seed, dtype=np.float64), margin, level))


def _seed_tests(by_seed: np.ndarray, margin: float, level: float) -> dict[str, float | None]:
    """The t-tests over the per-seed differences ``by_seed`` (points): the same hypotheses as the bootstrap's, and
    the t interval. None with one seed; with seeds that agree exactly, the tests are decided by the sign alone."""
    n = len(by_seed)
    if n < 2:
        return {}
    from scipy.stats import t as student  # scipy.stats takes a moment to import: only where seeds are compared
    mean, se = float(by_seed.mean()), float(by_seed.std(ddof=1)) / math.sqrt(n)
    df = n - 1

    def above(x: float) -> float:  # P(T >= (mean - x) / se) under the mean x: p of "the mean is at most x"
        if se == 0:
            return 0.0 if mean > x else 1.0
        return float(student.sf((mean - x) / se, df))

    def below(x: float) -> float:
        if se == 0:
            return 0.0 if mean < x else 1.0
        return float(student.cdf((mean - x) / se, df))

    far = abs(mean)
    folded = 0.0 if se == 0 and far > margin else 1.0 if se == 0 else float(
        student.sf((far - margin) / se, df) + student.cdf((-far - margin) / se, df))
    half = float(student.ppf(0.5 + level / 2, df)) * se
    return {"seed_low": mean - half, "seed_high": mean + half, "seed_p_greater": above(0.0), "seed_p_less": below(0.0),
            "seed_p_equivalent": max(above(-margin), below(margin)), "seed_p_beyond": min(1.0, folded),
            "seed_p_inferior": above(-margin)}


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of ``p_values`` (one family): each adjusted value is compared with the
    family-wise level directly. The k-th smallest p is multiplied by (m - k + 1), and adjusted values never fall as
    p grows."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Judgement:
    """One comparison's verdict and the test that gave it: ``test`` is the hypothesis its p-value is for
    (``greater``: A better; ``less``: B better; ``equivalent``: within the margin; ``beyond``: outside it), ``p``
    the deciding p-value (:meth:`PairedDifference.p`; doubled for ``greater`` and ``less``, a directional verdict
    being two-sided), ``p_holm`` Holm's adjustment of it within the claim (held against the level), ``sample``
    which sample decided (``images`` or ``seeds``)."""

    verdict: str
    test: str
    p: float
    p_holm: float
    sample: str


#: How much of the level each test spends: a directional verdict is two-sided (either direction may come out).
_SIDES = {"greater": 2, "less": 2, "equivalent": 1, "beyond": 1}


def judge(differences: Sequence[PairedDifference], kinds: Sequence[str], *, alpha: float = ALPHA
          ) -> list[Judgement]:
    """The verdict of each comparison in one claim, Holm-corrected over the claim's comparisons, with the test that
    decided it.

    ``kinds[i]`` is ``"better"`` (the claim: A beats B) or ``"comparable"`` (A is within the margin of B).
    A "better" comparison *holds* when A's gain is significant, *does not hold* when B's is (two-sided: the
    one-sided p doubled, so either verdict's 95% intervals exclude 0), is *equivalent* when neither is but the
    difference is shown to lie within the margin (two one-sided tests), and is *inconclusive* otherwise. A
    "comparable" one *holds* when equivalence is shown and *does not hold* when the difference is shown to exceed
    the margin (the folded test). Every p-value is the deciding one (images and seeds must both reject), Holm-adjusted
    within its family and held against ``alpha``.
    """
    if len(differences) != len(kinds):
        raise ValueError("one kind per comparison")
    for kind in kinds:
        if kind not in ("better", "comparable"):
            raise ValueError(f"unknown comparison kind {kind!r}")
    tests = {"better": ("greater", "less"), "comparable": ("equivalent", "beyond")}

    def deciding(d: PairedDifference, test: str) -> float:
        return min(1.0, _SIDES[test] * d.p(test))
    claimed = [deciding(d, tests[k][0]) for d, k in zip(differences, kinds)]
    against = [deciding(d, tests[k][1]) for d, k in zip(differences, kinds)]
    equivalent = [deciding(d, "equivalent") for d in differences]
    adjusted = {name: holm(values) for name, values in
                (("claimed", claimed), ("against", against), ("equivalent", equivalent))}
    judgements = []
    for i, (d, kind) in enumerate(zip(differences, kinds)):
        claim_test, against_test = tests[kind]
        if adjusted["claimed"][i] < alpha:
            verdict, test, family = "holds", claim_test, "claimed"
        elif adjusted["against"][i] < alpha:
            verdict, test, family = "does not hold", against_test, "against"
        elif kind == "better" and adjusted["equivalent"][i] < alpha:
            verdict, test, family = "equivalent", "equivalent", "equivalent"
        else:
            verdict, test, family = "inconclusive", claim_test, "claimed"
        judgements.append(Judgement(verdict, test, deciding(d, test), adjusted[family][i], d.decided_by(test)))
    return judgements


def decide(differences: Sequence[PairedDifference], kinds: Sequence[str], *, alpha: float = ALPHA) -> list[str]:
    """The verdicts of :func:`judge` alone."""
    return [j.verdict for j in judge(differences, kinds, alpha=alpha)]


def top1_interval(correct: np.ndarray, level: float = 0.95, *, resamples: int = 10_000,
                  seed: int = 0) -> tuple[float, float]:
    """The interval an arm's top-1 (in points) is quoted with, from its per-image correctness: Wilson's score
    interval for ``[images]`` (or one seed's ``[1, images]``); for ``[seeds, images]``, one arm run under several
    seeds, the percentile interval of its mean over the two-way bootstrap that resamples seeds and images (two arms
    are compared with :func:`paired_difference`, not by their intervals)."""
    correct = np.asarray(correct)
    if correct.ndim == 2 and correct.shape[0] > 1:
        values = correct.astype(np.float64)
        seeds, images = values.shape
        draws = np.empty(resamples)
        for chunk, w_seeds, w_images in _weights(seeds, images, resamples, seed):
            draws[chunk] = 100 * np.einsum("bs,si,bi->b", w_seeds, values, w_images) / (seeds * images)
        tail = (1 - level) / 2
        low, high = np.quantile(draws, [tail, 1 - tail])
        return float(low), float(high)
    correct = correct.reshape(-1)
    n = len(correct)
    if n == 0:
        raise ValueError("an interval needs at least one image")
    p, z = float(np.mean(correct)), NormalDist().inv_cdf(0.5 + level / 2)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(100 * (centre - half)), float(100 * (centre + half))


def pack_correct(correct: np.ndarray) -> str:
    """Per-image correctness as text (packed bits, base64), for a JSON store."""
    return base64.b64encode(np.packbits(np.asarray(correct).astype(bool)).tobytes()).decode("ascii")


def unpack_correct(text: str, images: int) -> np.ndarray:
    """:func:`pack_correct`'s inverse for ``images`` images."""
    return np.unpackbits(np.frombuffer(base64.b64decode(text), dtype=np.uint8))[:images].astype(bool)
