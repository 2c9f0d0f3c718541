"""Where vitprune keeps what it makes or fetches once: trained models and datasets."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$VITPRUNE_CACHE`` if set, else ``~/.cache/vitprune`` (read at every call, so tests can redirect it)."""
    return Path(os.environ.get("VITPRUNE_CACHE") or Path.home() / ".cache" / "vitprune")
