"""Figures of the HetDPT analyses, as PNG files, drawn with matplotlib.

Figures are drawn on a bare ``matplotlib.figure.Figure``, which renders PNG with the Agg backend
and leaves pyplot's global state (and the user's backend) alone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vitprune.errors import VitpruneError
from vitprune.methods.hetdpt.analysis import LAYER_TYPES
from vitprune.plotting import figure, save_figure

if TYPE_CHECKING:
    from vitprune.methods.hetdpt.predictor import PredictorFit, Split

_COLORS = {"attention": "tab:blue", "activation": "tab:orange"}


def plot_gradient_disparity(result: dict[str, Any], path: str | os.PathLike) -> Path:
    """Bars of each layer's mean ``|dloss/dmask|`` by block, attention beside activation, on a log scale.

    ``result`` is what :func:`~vitprune.methods.hetdpt.gradient_disparity` returns (or its JSON).
    """
    fig = figure(figsize=(8, 4))
    ax = fig.subplots()
    blocks = sorted({int(b) for kind in LAYER_TYPES for b in result[kind]})
    width = 0.4
    for offset, kind in zip((-width / 2, width / 2), LAYER_TYPES):
        present = [b for b in blocks if str(b) in result[kind]]
        ax.bar([b + offset for b in present], [result[kind][str(b)]["mean_abs"] for b in present], width,
               label=kind, color=_COLORS[kind])
    ax.set_yscale("log")
    ax.set_xticks(blocks)
    ax.set_xlabel("block")
    ax.set_ylabel("mean |dloss/dmask|")
    ratio = result["summary"]["ratio"]
    ax.set_title("Gradient disparity" + (f" (activation / attention = {ratio:.3g})" if ratio is not None else ""))
    ax.legend()
    return save_figure(fig, path)


def plot_recovery(result: dict[str, Any], path: str | os.PathLike) -> Path:
    """Top-1 after removing each single layer, right away and after fine-tuning, one panel per layer type.

    ``result`` is what :func:`~vitprune.methods.hetdpt.recovery_asymmetry` returns (or its JSON);
    a dashed line marks the dense model.
    """
    fig = figure(figsize=(10, 4))
    axes = fig.subplots(1, len(LAYER_TYPES), sharey=True, squeeze=False)[0]
    for ax, kind in zip(axes, LAYER_TYPES):
        rows = sorted((r for r in result["layers"] if r["type"] == kind), key=lambda r: r["block"])
        blocks = [r["block"] for r in rows]
        ax.plot(blocks, [100 * r["top1_pruned"] for r in rows], "o-", color=_COLORS[kind], label="after removal")
        ax.plot(blocks, [100 * r["top1_finetuned"] for r in rows], "s--", color="tab:green", label="after fine-tuning")
        ax.axhline(100 * result["dense_top1"], color="gray", linestyle=":", label="dense")
        ax.set_xticks(blocks)
        ax.set_xlabel("block")
        ax.set_title(f"one {kind} layer removed")
    axes[0].set_ylabel("top-1 (%)")
    axes[0].set_ylim(0, 100)
    axes[0].legend(loc="lower left")
    return save_figure(fig, path)


def _accuracy_levels(measured: np.ndarray, steps: int = 20) -> np.ndarray:
    """Contour levels spanning the measured accuracies (rounded out to 5 points, within 0-100).

    A polynomial fit runs far outside 0-100 where nothing was measured (the digits MAP reached -640%);
    levels over its whole range would leave the region the budget line crosses a single colour.
    """
    low = max(0.0, 5 * np.floor(np.min(measured) / 5))
    high = min(100.0, max(low + 5, 5 * np.ceil(np.max(measured) / 5)))
    return np.linspace(low, high, steps + 1)


def plot_predictor(fit: PredictorFit, path: str | os.PathLike, *, budget: int | None = None,
                   num_layers: int | None = None, split: Split | None = None) -> Path:
    """Filled contours of the MAP's predicted accuracy over pruned attention × pruned activation, with its data.

    ``fit`` comes from :func:`~vitprune.methods.hetdpt.fit_predictor`. Axes count pruned layers
    when ``num_layers`` is given and show pruning ratios otherwise. ``budget`` draws the line
    ``n_attn + n_act = budget``; ``split`` (from :func:`~vitprune.methods.hetdpt.search_split`)
    marks its feasible splits and stars the chosen one, and implies its own budget. Both need
    ``num_layers``. Points are coloured by their measured accuracy on the surface's scale.
    """
    if split is not None and budget is None:
        budget = split.attention + split.activation
    if budget is not None and num_layers is None:
        raise VitpruneError("plot_predictor needs num_layers to draw a budget or a split")
    scale = num_layers or 1
    fig = figure(figsize=(6, 5))
    ax = fig.subplots()
    grid = np.linspace(0, scale, 121)
    pruned_attn, pruned_act = np.meshgrid(grid, grid)
    points = np.asarray(fit.points)
    surface = ax.contourf(pruned_attn, pruned_act, fit.predict(1 - pruned_attn / scale, 1 - pruned_act / scale),
                          levels=_accuracy_levels(points[:, 2]), cmap="viridis", extend="both")
    fig.colorbar(surface, ax=ax, label="predicted accuracy (%)")
    ax.scatter((1 - points[:, 0]) * scale, (1 - points[:, 1]) * scale, c=points[:, 2], cmap=surface.cmap,
               norm=surface.norm, edgecolors="black", zorder=3, clip_on=False, label="measured")
    if budget is not None:
        ends = np.array([max(0, budget - scale), min(scale, budget)])
        ax.plot(ends, budget - ends, "w--", label=f"budget {budget}")
    if split is not None:
        ax.scatter([s["attention"] for s in split.line], [s["activation"] for s in split.line], marker="x",
                   color="white", zorder=3, clip_on=False)
        label = f"chosen {split.attention}+{split.activation}: {split.predicted:.2f}%"
        ax.scatter([split.attention], [split.activation], marker="*", s=250, color="tab:red", edgecolors="white",
                   zorder=4, clip_on=False, label=label)
    unit = "layers" if num_layers else "ratio"
    ax.set_xlabel(f"pruned attention {unit}")
    ax.set_ylabel(f"pruned activation {unit}")
    ax.set_xlim(0, scale)
    ax.set_ylim(0, scale)
    ax.set_aspect("equal")
    ax.set_title(f"MAP, degree {fit.degree} (L2OCV MAE {fit.mae:.3f}, RMSE {fit.rmse:.3f})")
    ax.legend(loc="upper right", fontsize="small")
    return save_figure(fig, path)
