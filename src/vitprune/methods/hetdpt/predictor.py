"""HetDPT's Model Accuracy Predictor (MAP): Stage 1, Step 1 of the paper (Sec. 3.2, Eqs. 4-5; App. C).

A few fine-tuned accuracies, measured at retained ratios ``a = n_a / L`` (attention) and
``t = n_g / L`` (activation), are fitted with a bivariate polynomial of total degree κ,
``P(a, t) = Σ_{i+j≤κ} θ_ij a^i t^j``. κ is chosen by leave-2-out cross-validation (L2OCV), as in
the paper's reference implementation (App. C.6). :func:`search_split` then enumerates every way
to split a budget of ``k`` pruned layers between the two types (Algorithm 3) and keeps the split
the MAP predicts best.

The optimum is usually flat (neighbouring splits differ by less than the CV error) and the
paper's theory assumes the fast fine-tune's bias is the same for every split, which its own
recovery-asymmetry observation contradicts. Treat the choice as a heuristic: :class:`Split` keeps
the whole budget line so a report can show how close the runners-up are.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from vitprune.atomic import parse_json, write_json
from vitprune.errors import VitpruneError

#: CV RMSEs this close count as a tie, broken towards the lower degree: on noise-free data every
#: degree at or above the true one fits exactly, and round-off should not pick the larger model.
_TIE = 1e-9


@dataclass
class PredictorFit:
    """A fitted MAP: ``P(a, t) = Σ coef[n] · a^i · t^j`` over ``terms[n] = (i, j)``, in retained ratios.

    ``mae``/``rmse`` are the L2OCV errors of the chosen ``degree``; ``cv`` holds them for every
    candidate degree. ``ridge`` is the penalty the fit used (0 is the paper's plain least squares).
    """

    degree: int
    terms: list[tuple[int, int]]
    coef: list[float]
    mae: float
    rmse: float
    cv: dict[int, dict[str, float]]
    points: list[tuple[float, float, float]]
    ridge: float = 0.0

    def predict(self, a: float | np.ndarray, t: float | np.ndarray) -> float | np.ndarray:
        """Predicted accuracy at retained ratios ``(a, t)``; arrays broadcast, scalars give a float."""
        a, t = np.broadcast_arrays(np.asarray(a, dtype=float), np.asarray(t, dtype=float))
        # A row-wise sum, not a matrix product: BLAS may add a row's terms in another order depending on how many
        # rows there are, and a point must predict the same whether asked alone or in a grid.
        value = (_design(a.ravel(), t.ravel(), self.terms) * np.asarray(self.coef)).sum(axis=1).reshape(a.shape)
        return float(value) if value.ndim == 0 else value

    def coefficient(self, i: int, j: int) -> float:
        """θ_ij, the coefficient of ``a^i t^j`` (0.0 for a term above the fitted degree)."""
        if i < 0 or j < 0:
            raise VitpruneError(f"powers of a and t are non-negative, got ({i}, {j})")
        return self.coef[self.terms.index((i, j))] if i + j <= self.degree else 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` of it (also after a JSON round trip) equals this fit."""
        return {
            "degree": self.degree,
            "terms": [list(term) for term in self.terms],
            "coef": list(self.coef),
            "mae": self.mae,
            "rmse": self.rmse,
            "cv": {str(degree): dict(errors) for degree, errors in self.cv.items()},
            "points": [list(point) for point in self.points],
            "ridge": self.ridge,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PredictorFit:
        """Rebuild a fit from :meth:`to_dict`'s output; raises :class:`VitpruneError` if it is malformed."""
        try:
            fit = cls(
                degree=int(data["degree"]),
                terms=[(int(i), int(j)) for i, j in data["terms"]],
                coef=[float(c) for c in data["coef"]],
                mae=float(data["mae"]),
                rmse=float(data["rmse"]),
                cv={int(d): {"mae": float(e["mae"]), "rmse": float(e["rmse"])} for d, e in data["cv"].items()},
                points=[(float(a), float(t), float(y)) for a, t, y in data["points"]],
                ridge=float(data["ridge"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise VitpruneError(f"malformed MAP fit: {type(exc).__name__}: {exc}") from None
        if fit.terms != _terms(fit.degree) or len(fit.coef) != len(fit.terms):
            raise VitpruneError(f"malformed MAP fit: terms and coefficients do not match degree {fit.degree}")
        return fit


@dataclass
class Split:
    """How to spend a depth budget: numbers of attention and activation layers to prune.

    ``line`` lists every feasible split of the budget, in order of pruned attention layers, as
    ``{"attention", "activation", "a", "t", "predicted"}`` dicts, so the margin to the runners-up
    can be reported.
    """

    attention: int
    activation: int
    predicted: float
    line: list[dict[str, Any]]


def fit_predictor(
    points: Iterable[Sequence[float]], degrees: Iterable[int] = (1, 2, 3, 4), ridge: float = 0.0,
) -> PredictorFit:
    """Fit the MAP to ``(a, t, accuracy)`` points, choosing the degree by L2OCV RMSE, then refitting on all points.

    L2OCV as in the paper's reference code: for every unordered pair of points, fit on the others
    and predict the pair; each point's predictions are averaged first, and MAE/RMSE are taken over
    those averages. Fits are ordinary least squares (minimum-norm when a fold has fewer points than
    terms). ``ridge > 0`` adds ``ridge · Σθ²`` over the non-constant terms, an extra the paper lacks.
    """
    data = _check_points(points)
    candidates = _check_degrees(degrees)
    if not (math.isfinite(ridge) and ridge >= 0):
        raise VitpruneError(f"ridge must be a finite number >= 0, got {ridge}")
    a, t, y = data.T
    cv = {degree: _l2ocv(_design(a, t, _terms(degree)), y, ridge) for degree in candidates}
    best = min(errors["rmse"] for errors in cv.values())
    degree = next(d for d in candidates if cv[d]["rmse"] <= best + _TIE)
    terms = _terms(degree)
    coef = _solve(_design(a, t, terms), y, ridge)
    return PredictorFit(
        degree=degree, terms=terms, coef=[float(c) for c in coef], mae=cv[degree]["mae"], rmse=cv[degree]["rmse"],
        cv=cv, points=[(float(p), float(q), float(r)) for p, q, r in data], ridge=float(ridge),
    )


def search_split(fit: PredictorFit, budget: int, num_layers: int, min_per_type: int = 0) -> Split:
    """The split of ``budget`` pruned layers that ``fit`` predicts best (Algorithm 3, exhaustive search).

    Each type gets between ``min_per_type`` and ``num_layers`` pruned layers; retained ratios are
    ``a = 1 - n_attn/L`` and ``t = 1 - n_act/L``. Algorithm 3 allows 0 of a type (the default); the
    paper's code prunes at least one of each (``min_per_type=1``). Ties go to the split with fewer
    attention layers pruned, as Algorithm 3 keeps the first strict maximum.
    """
    for name, value in (("budget", budget), ("num_layers", num_layers), ("min_per_type", min_per_type)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise VitpruneError(f"{name} must be an integer, got {value!r}")
    if num_layers < 1:
        raise VitpruneError(f"num_layers must be >= 1, got {num_layers}")
    if not 0 < budget <= 2 * num_layers:
        raise VitpruneError(f"budget must be between 1 and 2 * num_layers = {2 * num_layers}, got {budget}")
    if min_per_type < 0:
        raise VitpruneError(f"min_per_type must be >= 0, got {min_per_type}")
    low, high = max(min_per_type, budget - num_layers), min(num_layers, budget - min_per_type)
    if low > high:
        raise VitpruneError(f"no split of {budget} pruned layers prunes at least min_per_type={min_per_type} "
                            f"of each type and at most num_layers={num_layers}")
    attention = np.arange(low, high + 1)
    a, t = (num_layers - attention) / num_layers, (num_layers - (budget - attention)) / num_layers
    predicted = fit.predict(a, t)
    line = [{"attention": int(n), "activation": int(budget - n), "a": float(p), "t": float(q), "predicted": float(v)}
            for n, p, q, v in zip(attention, a, t, predicted)]
    best = line[int(np.argmax(predicted))]  # argmax returns the first maximum
    return Split(attention=best["attention"], activation=best["activation"], predicted=best["predicted"], line=line)


def save_predictor(fit: PredictorFit, path: str | os.PathLike) -> Path:
    """Write ``fit`` as JSON, atomically."""
    return write_json(path, fit.to_dict())


def load_predictor(path: str | os.PathLike) -> PredictorFit:
    """Read a fit written by :func:`save_predictor`."""
    path = Path(path)
    if not path.is_file():
        raise VitpruneError(f"no MAP fit at {path}: file does not exist")
    data = parse_json(path, "MAP file")
    if not isinstance(data, dict):
        raise VitpruneError(f"corrupt MAP file {path}: expected a JSON object")
    try:
        return PredictorFit.from_dict(data)
    except VitpruneError as exc:
        raise VitpruneError(f"corrupt MAP file {path}: {exc}") from None


def _terms(degree: int) -> list[tuple[int, int]]:
    # The reference code's order: by total degree, then by rising power of a (1, t, a, t², at, a², ...).
    return [(i, total - i) for total in range(degree + 1) for i in range(total + 1)]


def _design(a: np.ndarray, t: np.ndarray, terms: list[tuple[int, int]]) -> np.ndarray:
    return np.stack([a**i * t**j for i, j in terms], axis=-1)


def _solve(design: np.ndarray, y: np.ndarray, ridge: float) -> np.ndarray:
    if ridge:
        # Ridge as extra least-squares rows; column 0 is the constant term, left unpenalized so the
        # predictions are not pulled towards zero accuracy.
        penalty = math.sqrt(ridge) * np.eye(design.shape[1])[1:]
        design, y = np.vstack([design, penalty]), np.concatenate([y, np.zeros(len(penalty))])
    return np.linalg.lstsq(design, y, rcond=None)[0]


def _l2ocv(design: np.ndarray, y: np.ndarray, ridge: float) -> dict[str, float]:
    n = len(y)
    total = np.zeros(n)
    for pair in combinations(range(n), 2):
        keep = np.ones(n, dtype=bool)
        keep[list(pair)] = False
        total[list(pair)] += design[list(pair)] @ _solve(design[keep], y[keep], ridge)
    error = total / (n - 1) - y  # each point is held out once with every other point
    return {"mae": float(np.mean(np.abs(error))), "rmse": float(np.sqrt(np.mean(error**2)))}


def _check_points(points: Iterable[Sequence[float]]) -> np.ndarray:
    try:
        data = np.array([tuple(point) for point in points], dtype=float)
    except (TypeError, ValueError) as exc:
        raise VitpruneError(f"MAP points must be (a, t, accuracy) number triples: {exc}") from None
    if len(data) < 3:
        raise VitpruneError(f"the MAP needs at least 3 points, got {len(data)}: leave-2-out cross-validation "
                            "holds out two and must fit on the rest")
    if data.ndim != 2 or data.shape[1] != 3:
        raise VitpruneError("MAP points must be (a, t, accuracy) triples")
    if not np.isfinite(data).all():
        raise VitpruneError("MAP points must be finite numbers")
    ratios = data[:, :2]
    if ((ratios < 0) | (ratios > 1)).any():
        raise VitpruneError("MAP points take retained ratios a = n_attn/L and t = n_act/L in [0, 1], not layer counts")
    return data


def _check_degrees(degrees: Iterable[int]) -> list[int]:
    degrees = list(degrees)
    if not degrees or any(not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 0 for d in degrees):
        raise VitpruneError(f"degrees must be a non-empty list of integers >= 0, got {degrees}")
    return sorted(set(int(d) for d in degrees))
