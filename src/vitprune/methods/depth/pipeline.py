"""``vitprune prune depth`` as a function: prune a copy, save it with its report in the metadata, time it."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vitprune.measure import SpeedConfig, count_macs
from vitprune.methods.report import Report
from vitprune.methods.stages import save_and_time
from vitprune.surgery import prune_depth

#: The key of the report in the saved model's metadata.
METADATA_KEY = "prune_depth"


@dataclass
class DepthReport(Report):
    """What :func:`run_depth` did and measured; the save's metadata holds its :meth:`to_dict` but for ``speed``."""

    #: The starting checkpoint's name, as the caller gave it (``None``: none given).
    model: str | None
    #: Where the pruned model was saved.
    out: str
    attention: list[int]
    activation: list[int]
    identity: str
    fold_norm: bool
    output_gelu: bool
    #: Params and MACs in both conventions (:meth:`~vitprune.measure.MacReport.totals`), before and after.
    before: dict[str, int]
    after: dict[str, int]
    #: The pruned model timed against the original (``None``: not measured).
    speed: dict[str, Any] | None


def run_depth(model: nn.Module, attention: Sequence[int] = (), activation: Sequence[int] = (), *, out: str | Path,
              name: str | None = None, identity: str = "norm", fold_norm: bool = False, output_gelu: bool = False,
              speed: SpeedConfig = SpeedConfig(), device: torch.device | str | None = None,
              progress: bool = False) -> DepthReport:
    """Remove the attention of blocks ``attention`` and the activation of blocks ``activation`` from a copy of
    ``model`` (:func:`~vitprune.surgery.prune_depth`), save it to ``out`` and time it against ``model``; returns the
    report (``name``: the starting checkpoint's, for the report)."""
    pruned = copy.deepcopy(model)
    prune_depth(pruned, attention, activation, identity=identity, fold_norm=fold_norm, output_gelu=output_gelu)
    report = DepthReport(model=name, out=str(out), attention=sorted(attention), activation=sorted(activation),
                         identity=identity, fold_norm=fold_norm, output_gelu=output_gelu,
                         before=count_macs(model).totals(), after=count_macs(pruned).totals(), speed=None)
    return save_and_time(report, METADATA_KEY, pruned, model, speed, device=device, progress=progress)
