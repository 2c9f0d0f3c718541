"""Progress bars: the one layout evaluation and fine-tuning share, and the fine-tuning callback that drives it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sized
from contextlib import contextmanager
from itertools import islice
from typing import TYPE_CHECKING, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from vitprune.errors import VitpruneError

if TYPE_CHECKING:  # the engine's evaluation uses this module's bar, so importing the engine here would loop
    from vitprune.training.engine import Trainer


@contextmanager
def progress_bar(enabled: bool, console: Console | None = None) -> Iterator[Progress]:
    """A rich bar on stderr (description, bar, done/total, a ``stats`` field, elapsed); silent if disabled."""
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[stats]}"),
                  TimeElapsedColumn(), console=console or Console(stderr=True), disable=not enabled) as bar:
        yield bar


T = TypeVar("T")


def track_batches(loader: Iterable[T], description: str, *, max_batches: int | None = None,
                  enabled: bool = False) -> Iterator[T]:
    """The first ``max_batches`` items of ``loader`` (all if ``None``) behind a :func:`progress_bar`."""
    if max_batches is not None and max_batches < 1:
        raise VitpruneError(f"max_batches must be at least 1, got {max_batches}")
    total = len(loader) if isinstance(loader, Sized) else None
    if max_batches is not None:
        total = max_batches if total is None else min(total, max_batches)
    with progress_bar(enabled) as bar:
        task = bar.add_task(description, total=total, stats="")
        # track() resets the total, to the unknown length of an islice unless told.
        yield from bar.track(islice(loader, max_batches), total=total, task_id=task)


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
