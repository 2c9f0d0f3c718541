"""Progress bars: the one layout evaluation and fine-tuning share, and the fine-tuning callback that drives it.

Where the console is not a terminal (a log file, CI, ``nohup``) a bar cannot redraw, and rich would show it once, at
the end: there each bar prints its state as plain lines instead (:class:`LineProgress`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sized
from contextlib import contextmanager
from datetime import timedelta
from itertools import islice
from typing import Any, Protocol, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, Task, TaskID, TextColumn, TimeElapsedColumn

from vitprune.errors import VitpruneError


class _Run(Protocol):
    """What the bar reads of a training run (:class:`~vitprune.training.engine.Trainer`): its length and position.
    The engine's evaluation uses this module's bar, so naming the engine here would make an import circle."""

    config: Any
    epoch: int
    batch: int
    batches_per_epoch: int


#: Seconds between the lines of a bar on a console that is not a terminal (:class:`LineProgress`).
LINE_INTERVAL = 30.0


class LineProgress(Progress):
    """A bar for a console that is not a terminal: each task's state (description, done/total, ``stats``, elapsed) as
    a plain line every ``interval`` seconds, on an update with ``refresh`` (the end of an epoch) and when the task
    completes, or at the end if it never does. ``get_time`` is rich's clock."""

    def __init__(self, console: Console, interval: float, get_time: Callable[[], float] | None = None) -> None:
        # No live display and no refresh thread: track() then advances its task item by item, in the caller's thread.
        super().__init__(console=console, auto_refresh=False, disable=True, get_time=get_time)
        self.interval = interval
        #: When each task last printed a line (or started), and the tasks changed since.
        self._printed: dict[TaskID, float] = {}
        self._unprinted: set[TaskID] = set()

    def add_task(self, description: str, *args: Any, **kwargs: Any) -> TaskID:
        task_id = super().add_task(description, *args, **kwargs)
        self._printed[task_id] = self.get_time()
        return task_id

    def update(self, task_id: TaskID, *, refresh: bool = False, **changes: Any) -> None:
        task = self._task(task_id)
        finished = task.finished
        super().update(task_id, **changes)
        self._changed(task, show=refresh or (task.finished and not finished))

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        task = self._task(task_id)
        finished = task.finished
        super().advance(task_id, advance)
        self._changed(task, show=task.finished and not finished)

    def stop(self) -> None:
        for task in self.tasks:
            if task.id in self._unprinted:
                self._print(task)
        super().stop()

    def _task(self, task_id: TaskID) -> Task:
        return next(task for task in self.tasks if task.id == task_id)

    def _changed(self, task: Task, *, show: bool) -> None:
        self._unprinted.add(task.id)
        if show or self.get_time() - self._printed[task.id] >= self.interval:
            self._print(task)

    def _print(self, task: Task) -> None:
        done = f"{task.completed:.0f}" + ("" if task.total is None else f"/{task.total:.0f}")
        parts = (task.description, done, task.fields.get("stats", ""), str(timedelta(seconds=int(task.elapsed or 0))))
        self.console.print(" ".join(part for part in parts if part), markup=False, highlight=False, soft_wrap=True)
        self._printed[task.id] = self.get_time()
        self._unprinted.discard(task.id)


@contextmanager
def progress_bar(enabled: bool, console: Console | None = None) -> Iterator[Progress]:
    """A rich bar on stderr (description, bar, done/total, a ``stats`` field, elapsed), or its :class:`LineProgress`
    where the console cannot redraw; silent if disabled."""
    console = console or Console(stderr=True)
    if enabled and not (console.is_interactive or console.is_jupyter):  # a dumb terminal cannot redraw either
        bar = LineProgress(console, LINE_INTERVAL)
    else:
        bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), console=console, disable=not enabled)
    with bar:
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
def training_progress(trainer: _Run, *, enabled: bool = True,
                      console: Console | None = None) -> Iterator[Callable[[_Run, float, float], None]]:
    """Yield an ``on_batch`` callback for :meth:`Trainer.fit` that drives a rich bar on stderr (silent if disabled)."""
    total_epochs = trainer.config.epochs
    with progress_bar(enabled, console) as bar:
        first = trainer.epoch * trainer.batches_per_epoch + trainer.batch
        task = bar.add_task("training", total=total_epochs * trainer.batches_per_epoch, stats="", completed=first)
        start = time.perf_counter()

        def on_batch(t: _Run, loss: float, top1: float) -> None:
            done = t.epoch * t.batches_per_epoch + t.batch
            # Images of this process; under torchrun every process runs at about the same rate.
            speed = (done - first) * t.local_batch / (time.perf_counter() - start)
            # Refreshed at the epoch's last batch: a log (LineProgress) then holds each epoch's final state.
            bar.update(task, completed=done, description=f"epoch {t.epoch + 1}/{total_epochs}",
                       stats=f"loss {loss:.3f}  acc {top1:.3f}  {speed:.0f} img/s",
                       refresh=t.batch == t.batches_per_epoch)

        yield on_batch
