"""What every method's run takes besides its model and config: the data it reads (:class:`MethodData`) and where and
how it runs (:class:`RunContext`), and the mark of a method's one entry point (:func:`method_run`).

Imports no torch: the command line builds contexts at start-up.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from vitprune.atomic import check_writable
from vitprune.errors import VitpruneError
from vitprune.measure.config import SpeedConfig
from vitprune.runs.claim import claimed

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.utils.data import Dataset

    from vitprune.training.distributed import DistContext

R = TypeVar("R")


@dataclass
class MethodData:
    """The sets a method reads: ``train`` (augmented, for fine-tuning), ``val`` (evaluation) and ``calibration`` (the
    training images under the evaluation transform, for statistics and rankings; ``None``: ``train``)."""

    train: Dataset | None = None
    val: Dataset | None = None
    calibration: Dataset | None = None

    @property
    def calibration_or_train(self) -> Dataset | None:
        return self.calibration if self.calibration is not None else self.train


def _silent(_message: str) -> None:
    pass


@dataclass
class RunContext:
    """Where and how a method runs; the same for every method and for a chain."""

    #: The run directory (stage files, ``model/``, ``report.json``); for a method whose output is one model
    #: (:attr:`~vitprune.runs.method.Method.out_is_model`), the model directory itself.
    run_dir: Path
    device: torch.device | str | None = None
    progress: bool = False
    #: Continue the run in :attr:`run_dir` (without it, one that holds a run is refused).
    resume: bool = False
    #: Replace the model at :attr:`run_dir` (a method whose output is one model; without it, one there is refused).
    overwrite: bool = False
    log: Callable[[str], None] = _silent
    #: How the result is timed against the starting model (off inside a chain: the chain times its final model).
    speed: SpeedConfig = field(default_factory=SpeedConfig)
    #: The torchrun context (``None``: one process).
    dist: DistContext | None = None
    #: The model a fine-tune distils from (``None``: the model the method starts from).
    teacher: nn.Module | None = None
    #: The starting checkpoint's name, for the report.
    name: str | None = None
    #: Called with each training epoch's figures, by methods that train.
    on_epoch: Callable[[dict[str, Any]], None] | None = None

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir)

    def device_for(self, model: nn.Module) -> torch.device:
        """Where the run computes: :attr:`device`, else under torchrun this process's, else ``model``'s."""
        import torch

        if self.device is not None:
            return torch.device(self.device)
        return self.dist.device if self.dist is not None else next(model.parameters()).device

    @contextmanager
    def claim(self) -> Iterator[None]:
        """Hold :attr:`run_dir` for this process while the block runs (:func:`~vitprune.runs.claim.claimed`): another
        process writing there is refused in one line. Under torchrun rank 0 holds it for every rank."""
        from vitprune.training.distributed import on_main

        held = ExitStack()
        on_main(lambda: held.enter_context(claimed(self.run_dir, self.log)))
        try:
            yield
        finally:
            on_main(held.close)


def check_target(path: Path, overwrite: bool, option: str) -> None:
    """Refuse in one line to write over an existing ``path`` unless ``overwrite`` (``option``: what the command
    line calls it), and a ``path`` this process cannot write. Under torchrun rank 0 looks (join the group first), so
    no rank finds what rank 0 has just written."""
    from vitprune.training.distributed import on_main

    def check() -> None:
        if path.exists() and not overwrite:
            raise VitpruneError(f"{path} already exists; pass --overwrite to replace it, or choose another {option}")
        check_writable(path)

    on_main(check)


#: The parameters of every method's entry point, in order.
ENTRY_PARAMETERS = ("model", "data", "config", "ctx")


def method_run(run: Callable[..., R]) -> Callable[..., R]:
    """Mark ``run`` as a method's one entry point, ``run(model, data: MethodData, config, ctx: RunContext) ->
    Report``: it runs holding ``ctx.run_dir`` (:meth:`RunContext.claim`), so that two processes never write one
    output. A function of another shape is a :class:`TypeError` where it is defined."""
    if tuple(inspect.signature(run).parameters) != ENTRY_PARAMETERS:
        raise TypeError(f"{run.__qualname__}: a method's entry point takes ({', '.join(ENTRY_PARAMETERS)})")

    @functools.wraps(run)
    def claimed_run(model: nn.Module, data: MethodData, config: Any, ctx: RunContext) -> R:
        with ctx.claim():
            return run(model, data, config, ctx)

    claimed_run.method_run = True  # type: ignore[attr-defined]
    return claimed_run


__all__ = ["ENTRY_PARAMETERS", "MethodData", "RunContext", "check_target", "method_run"]
