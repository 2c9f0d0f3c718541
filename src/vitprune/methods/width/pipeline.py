"""``vitprune prune width`` as a function: plan with torch-pruning (by a ratio or to a MAC target), cut a copy by
recorded edits, save it with its report in the metadata, time it."""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from vitprune.data import build_loader
from vitprune.errors import VitpruneError
from vitprune.measure import SpeedConfig, count_macs
from vitprune.methods.report import Report
from vitprune.methods.stages import save_and_time
from vitprune.methods.width.isomorphic import apply_width, plan_width, prune_width_to_macs

#: The key of the report in the saved model's metadata.
METADATA_KEY = "prune_width"


@dataclass
class WidthReport(Report):
    """What :func:`run_width` did and measured; the save's metadata holds its :meth:`to_dict` but for ``speed``."""

    #: The starting checkpoint's name, as the caller gave it (``None``: none given).
    model: str | None
    #: Where the pruned model was saved.
    out: str
    #: torch-pruning's channel ratio, given or found for the MAC target.
    ratio: float
    #: The MAC target in GMACs per image (``None``: pruned at a given ratio).
    target_gmacs: float | None
    convention: str
    #: ``importance``, ``heads``, ``embed``, ``isomorphic`` and ``round_to``, as planned with.
    options: dict[str, Any]
    #: What was removed (:meth:`~vitprune.methods.width.WidthPlan.to_dict`).
    plan: dict[str, Any]
    #: Params and MACs in both conventions (:meth:`~vitprune.measure.MacReport.totals`), before and after.
    before: dict[str, int]
    after: dict[str, int]
    #: The pruned model timed against the original (``None``: not measured).
    speed: dict[str, Any] | None


def run_width(model: nn.Module, *, out: str | Path, ratio: float | None = None, target_macs: float | None = None,
              convention: str = "full", importance: str = "magnitude", heads: bool = False, embed: bool = True,
              isomorphic: bool = True, round_to: int | None = None, train_set: Dataset | None = None,
              batches: int = 4, name: str | None = None, speed: SpeedConfig = SpeedConfig(),
              device: torch.device | str | None = None, progress: bool = False) -> WidthReport:
    """Width-prune a copy of ``model`` at ``ratio`` or to ``target_macs`` MACs per image (in ``convention``), as
    :func:`~vitprune.methods.width.plan_width` plans with the other options, save it to ``out`` and time it against
    ``model``; returns the report (``name``: the starting checkpoint's, for the report). ``taylor`` importance takes
    ``batches`` shuffled batches of 16 from ``train_set``."""
    if (ratio is None) == (target_macs is None):
        raise VitpruneError("give exactly one of ratio and target_macs")
    options = {"importance": importance, "heads": heads, "embed": embed, "isomorphic": isomorphic,
               "round_to": round_to}
    pruned = copy.deepcopy(model)
    taylor = _taylor_batches(train_set, batches, next(model.parameters()).device) if importance == "taylor" else []
    if target_macs is not None:
        ratio, plan = prune_width_to_macs(pruned, target_macs, convention=convention, batches=taylor, **options)
    else:
        plan = plan_width(pruned, ratio, batches=taylor, **options)
        apply_width(pruned, plan)
    report = WidthReport(model=name, out=str(out), ratio=ratio,
                         target_gmacs=None if target_macs is None else target_macs / 1e9, convention=convention,
                         options=options, plan=plan.to_dict(), before=count_macs(model).totals(),
                         after=count_macs(pruned).totals(), speed=None)
    return save_and_time(report, METADATA_KEY, pruned, model, speed, device=device, progress=progress)


def _taylor_batches(train_set: Dataset | None, batches: int,
                    device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if train_set is None:
        raise VitpruneError("taylor importance needs a training set")
    loader = build_loader(train_set, 16, shuffle=True, seed=0)
    return [(x.to(device), y.to(device)) for x, y in itertools.islice(loader, batches)]
