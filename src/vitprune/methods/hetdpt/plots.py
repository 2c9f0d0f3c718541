"""Figures of the HetDPT analyses, as PNG files (needs matplotlib: ``pip install 'vitprune[plot]'``).

Figures are drawn on a bare ``matplotlib.figure.Figure``, which renders PNG with the Agg backend
and leaves pyplot's global state (and the user's backend) alone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitprune.atomic import atomic_file
from vitprune.errors import VitpruneError
from vitprune.methods.hetdpt.analysis import LAYER_TYPES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_COLORS = {"attention": "tab:blue", "activation": "tab:orange"}


def plot_gradient_disparity(result: dict[str, Any], path: str | os.PathLike) -> Path:
    """Bars of each layer's mean ``|dloss/dmask|`` by block, attention beside activation, on a log scale.

    ``result`` is what :func:`~vitprune.methods.hetdpt.gradient_disparity` returns (or its JSON).
    """
    fig = _figure(figsize=(8, 4))
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
    return _save(fig, path)


def plot_recovery(result: dict[str, Any], path: str | os.PathLike) -> Path:
    """Top-1 after removing each single layer, right away and after fine-tuning, one panel per layer type.

    ``result`` is what :func:`~vitprune.methods.hetdpt.recovery_asymmetry` returns (or its JSON);
    a dashed line marks the dense model.
    """
    fig = _figure(figsize=(10, 4))
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
    return _save(fig, path)


def _figure(**kwargs: Any) -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise VitpruneError("plotting needs matplotlib, which is not installed: pip install 'vitprune[plot]'") from None
    return Figure(layout="constrained", **kwargs)


def _save(fig: Figure, path: str | os.PathLike) -> Path:
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    return Path(path)
