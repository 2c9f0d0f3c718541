"""``vitprune prune width`` as a function: plan with torch-pruning (by a ratio or to a MAC target), cut a copy by
recorded edits, save it with its report in the metadata, time it."""

from __future__ import annotations

import copy
import itertools
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from vitprune.config import setting
from vitprune.data import build_loader
from vitprune.errors import VitpruneError
from vitprune.measure import CONVENTIONS, SpeedConfig, count_macs
from vitprune.methods.report import Report
from vitprune.methods.stages import save_and_time
from vitprune.methods.width.isomorphic import (IMPORTANCES, apply_width, plan_width, prune_width_to_macs,
                                              width_requirements)

#: The key of the report in the saved model's metadata.
METADATA_KEY = "prune_width"


@dataclass
class WidthConfig:
    """How much to cut and how torch-pruning chooses it (:func:`~vitprune.methods.width.plan_width`'s settings)."""

    #: Exactly one of ``ratio`` and ``target_macs`` is set.
    ratio: float | None = setting(None, short="-p", alternative=True, help="torch-pruning's channel ratio, e.g. 0.5.")
    #: MACs per image in ``convention``, reached by bisection on the ratio.
    target_macs: float | None = setting(None, flag="--macs", scale=1e9, alternative=True,
                                        help="Target GMACs per image (in --convention), found by bisection on the "
                                             "ratio.")
    convention: str = setting("full", choices=CONVENTIONS, help="MAC convention of --macs: full (with attention "
                                                                "matmuls) or linear (Linear/Conv only).")
    importance: str = setting("magnitude", choices=IMPORTANCES,
                              help="magnitude (data-free) or taylor (needs training data).")
    heads: bool = setting(False, flag="--heads/--head-dims", help="Remove whole heads instead of head dimensions.")
    embed: bool = setting(True, help="Also prune the residual stream's channels.")
    isomorphic: bool = setting(True, flag="--isomorphic/--global",
                               help="Rank within groups of the same shape (Isomorphic Pruning) or all together.")
    round_to: int | None = setting(None, min=1, help="Keep every width a multiple of N (8: faster kernels).")
    batches: int = setting(4, min=1, help="Training batches of 16 for taylor importance.")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    @property
    def requires(self) -> tuple[str, ...]:
        """What width pruning with these settings needs of a model's family."""
        return width_requirements(self.embed)

    def plan_options(self) -> dict[str, Any]:
        """The options :func:`~vitprune.methods.width.plan_width` plans with (the report's ``options``)."""
        return {"importance": self.importance, "heads": self.heads, "embed": self.embed,
                "isomorphic": self.isomorphic, "round_to": self.round_to}

    def validate(self) -> None:
        """Fail at once, before torch-pruning plans, on a setting it would reject."""
        if (self.ratio is None) == (self.target_macs is None):
            raise VitpruneError("give exactly one of ratio and target_macs (MACs; --macs in GMACs)")
        if self.ratio is not None and not 0 <= self.ratio < 1:
            raise VitpruneError(f"width ratio must be in [0, 1), got {self.ratio}")
        for name, allowed in (("convention", CONVENTIONS), ("importance", IMPORTANCES)):
            if getattr(self, name) not in allowed:
                raise VitpruneError(f"unknown {name} {getattr(self, name)!r} (choose from: {', '.join(allowed)})")
        if self.round_to is not None and self.round_to < 1:
            raise VitpruneError(f"round_to must be at least 1, got {self.round_to}")
        if self.batches < 1:
            raise VitpruneError(f"batches must be at least 1, got {self.batches}")


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


def run_width(model: nn.Module, config: WidthConfig, *, out: str | Path, train_set: Dataset | None = None,
              name: str | None = None, speed: SpeedConfig = SpeedConfig(), device: torch.device | str | None = None,
              progress: bool = False) -> WidthReport:
    """Width-prune a copy of ``model`` at ``config.ratio`` or to ``config.target_macs`` MACs per image (in
    ``config.convention``), as :func:`~vitprune.methods.width.plan_width` plans with the other settings, save it to
    ``out`` and time it against ``model``; returns the report (``name``: the starting checkpoint's, for the report).
    ``taylor`` importance takes ``config.batches`` shuffled batches of 16 from ``train_set``."""
    config.validate()
    speed.validate()
    if config.importance == "taylor" and train_set is None:
        raise VitpruneError("taylor importance needs a training set")
    options = config.plan_options()
    pruned = copy.deepcopy(model)
    taylor = (_taylor_batches(train_set, config.batches, next(model.parameters()).device)
              if config.importance == "taylor" else [])
    ratio, target_macs = config.ratio, config.target_macs
    if target_macs is not None:
        ratio, plan = prune_width_to_macs(pruned, target_macs, convention=config.convention, batches=taylor,
                                          **options)
    else:
        plan = plan_width(pruned, ratio, batches=taylor, **options)
        apply_width(pruned, plan)
    report = WidthReport(model=name, out=str(out), ratio=ratio,
                         target_gmacs=None if target_macs is None else target_macs / 1e9,
                         convention=config.convention, options=options, plan=plan.to_dict(),
                         before=count_macs(model).totals(),
                         after=count_macs(pruned).totals(), speed=None)
    return save_and_time(report, METADATA_KEY, pruned, model, speed, device=device, progress=progress)


def _taylor_batches(train_set: Dataset, batches: int,
                    device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    loader = build_loader(train_set, 16, shuffle=True, seed=0)
    return [(x.to(device), y.to(device)) for x, y in itertools.islice(loader, batches)]
