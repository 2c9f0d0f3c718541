"""What every method's pipeline shares: named stages, timed and announced as they start."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Stages:
    """Runs named stages, announcing each through ``log`` and adding its wall time to :attr:`seconds`."""

    def __init__(self, log: Callable[[str], None] = lambda _msg: None) -> None:
        self.log = log
        self.seconds: dict[str, float] = {}

    def run(self, name: str, fn: Callable[[], T]) -> T:
        """``fn()``, timed under ``name``."""
        start = time.perf_counter()
        self.log(f"[bold]{name}[/]")
        result = fn()
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        return result
