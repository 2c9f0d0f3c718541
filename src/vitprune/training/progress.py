"""Progress bars: the one layout evaluation and fine-tuning share, and the fine-tuning callback that drives it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:  # the engine's evaluation uses this module's bar, so importing the engine here would loop
    from vitprune.training.engine import Trainer


@contextmanager
def progress_bar(enabled: bool, console: Console | None = None) -> Iterator[Progress]:
    """A rich bar on stderr (description, bar, done/total, a ``stats`` field, elapsed); silent if disabled."""
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[stats]}"),
                  TimeElapsedColumn(), console=console or Console(stderr=True), disable=not enabled) as bar:
        yield bar


@contextmanager
def training_progress(trainer: Trainer, *, enabled: bool = True,
                      console: Console | None = None) -> Iterator[Callable[[Trainer, float, float], None]]:
    """Yield an ``on_batch`` callback for :meth:`Trainer.fit` that drives a rich bar on stderr (silent if disabled)."""
    total_epochs = trainer.config.epochs
    with progress_bar(enabled, console) as bar:
        first = trainer.epoch * trainer.batches_per_epoch + trainer.batch
        task = bar.add_task("training", total=total_epochs * trainer.batches_per_epoch, stats="", completed=first)
        start = time.perf_counter()

        def on_batch(t: Trainer, loss: float, top1: float) -> None:
            done = t.epoch * t.batches_per_epoch + t.batch
            # Images of this process; under torchrun every process runs at about the same rate.
            speed = (done - first) * t.local_batch / (time.perf_counter() - start)
            bar.update(task, completed=done, description=f"epoch {t.epoch + 1}/{total_epochs}",
                       stats=f"loss {loss:.3f}  acc {top1:.3f}  {speed:.0f} img/s")

        yield on_batch
