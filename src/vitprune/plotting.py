"""What every figure shares: a bare matplotlib ``Figure`` (Agg, no pyplot state) and an atomic PNG save."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitprune.atomic import atomic_file
from vitprune.errors import VitpruneError

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def figure(**kwargs: Any) -> Figure:
    """A constrained-layout figure that renders without touching pyplot or the user's backend."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise VitpruneError("plotting needs matplotlib, a vitprune dependency that is missing: "
                            "pip install matplotlib") from None
    return Figure(layout="constrained", **kwargs)


def save_figure(fig: Figure, path: str | os.PathLike) -> Path:
    """Write ``fig`` as a PNG to ``path``, atomically."""
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    return Path(path)
