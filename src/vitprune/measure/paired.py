"""Paired statistics for accuracy comparisons: two models scored on the same images, under the same seeds.

Two arms scored on the same validation images are compared image by image: an image both get right (or both
wrong) says nothing about their difference, so a paired test sees a gap that two separate intervals hide. When
the arms are also run under several seeds (a seed picks the starting checkpoint, the fine-tune's images, a random
selection), seeds are a second sample: :func:`paired_difference` resamples images and seeds independently (the
two-way "pigeonhole" bootstrap of Owen, 2007, for crossed random effects). scipy's ``bootstrap`` resamples one
axis only, which would treat three seeds' results on one image as independent. With one seed it is a plain paired
bootstrap over images, which agrees with McNemar's test on the discordant images.

Decisions within one claim are corrected for the number of comparisons with Holm's step-down method
(:func:`holm`), and "comparable" is decided by an equivalence margin fixed in advance with two one-sided tests, not
by overlapping intervals.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from vitprune.config import JsonRecord
from vitprune.measure.config import ALPHA, MARGIN



@dataclass(frozen=True)
class PairedDifference(JsonRecord):
    """Top-1 (or another score) of arm A minus arm B in points, with its bootstrap distribution's summaries.

    ``low`` and ``high`` bound the two-sided ``level`` interval. ``p_greater`` is the one-sided p-value of
    "A is not better" (the share of resampled differences at or below 0), ``p_less`` of "A is not worse",
    ``p_equivalent`` the two one-sided tests' p-value of "the difference lies outside ±``margin``", ``p_beyond``
    the p-value of "it lies within" (the smaller one-sided share, doubled: either side may be the one), ``p_inferior``
    the one-sided p-value of "A is worse than B by the margin or more" (a small one shows A non-inferior to B).
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
    return _summary(float(diff.mean()), draws, margin, level, seeds, images, float(np.mean(a != b)))


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
    seeds, images, _ = a.shape
    effect = float(np.mean(metric(a.sum(axis=1)) - metric(b.sum(axis=1))))
    draws = np.empty(resamples)
    for chunk, w_seeds, w_images in _weights(seeds, images, resamples, seed):
        per_seed = (metric(np.einsum("bi,sik->bsk", w_images, a)) - metric(np.einsum("bi,sik->bsk", w_images, b)))
        draws[chunk] = np.einsum("bs,bs->b", w_seeds, per_seed) / seeds
    return _summary(effect, draws, margin, level, seeds, images, float(np.mean((a != b).any(axis=2))))


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


def _summary(effect: float, draws: np.ndarray, margin: float, level: float, seeds: int, images: int,
             discordant: float) -> PairedDifference:
    """The interval and p-values of ``draws``: resampled differences beyond the null value, counted with the usual
    +1 so none is 0."""
    resamples = len(draws)
    tail = (1 - level) / 2
    low, high = np.quantile(draws, [tail, 1 - tail])

    def p(count: int) -> float:
        return float((count + 1) / (resamples + 1))

    below, above = p(int(np.sum(draws <= -margin))), p(int(np.sum(draws >= margin)))
    beyond = min(1.0, 2 * min(p(int(np.sum(draws <= margin))), p(int(np.sum(draws >= -margin)))))
    return PairedDifference(effect=effect, low=float(low), high=float(high),
                            p_greater=p(int(np.sum(draws <= 0))), p_less=p(int(np.sum(draws >= 0))),
                            p_equivalent=max(below, above), p_beyond=beyond, margin=margin, seeds=seeds, images=images,
                            discordant=discordant, p_inferior=below)


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


def decide(differences: Sequence[PairedDifference], kinds: Sequence[str], *, alpha: float = ALPHA) -> list[str]:
    """The verdict of each comparison in one claim, Holm-corrected over the claim's comparisons.

    ``kinds[i]`` is ``"better"`` (the claim: A beats B) or ``"comparable"`` (A is within the margin of B).
    A "better" comparison *holds* when A's gain is significant, *does not hold* when B's is, is *equivalent*
    when neither is but the difference is shown to lie within the margin, and is *inconclusive* otherwise. A
    "comparable" one *holds* when equivalence is shown and *does not hold* when the difference is shown to exceed
    the margin (``p_beyond``).
    """
    if len(differences) != len(kinds):
        raise ValueError("one kind per comparison")
    for kind in kinds:
        if kind not in ("better", "comparable"):
            raise ValueError(f"unknown comparison kind {kind!r}")
    claimed = holm([d.p_greater if k == "better" else d.p_equivalent for d, k in zip(differences, kinds)])
    against = holm([d.p_less if k == "better" else d.p_beyond for d, k in zip(differences, kinds)])
    equivalent = holm([d.p_equivalent for d in differences])
    verdicts = []
    for i, kind in enumerate(kinds):
        if claimed[i] < alpha:
            verdicts.append("holds")
        elif against[i] < alpha:
            verdicts.append("does not hold")
        elif kind == "better" and equivalent[i] < alpha:
            verdicts.append("equivalent")
        else:
            verdicts.append("inconclusive")
    return verdicts



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
