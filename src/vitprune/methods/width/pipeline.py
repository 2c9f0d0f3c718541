"""``vitprune prune width`` as a function: plan with torch-pruning (by a ratio or to a MAC target), cut a copy by
recorded edits, save it with its report in the metadata, time it."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
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
from vitprune.methods.width.isomorphic import (IMPORTANCES, apply_width, check_attention_shares, plan_width,
                                              prune_width_to_macs, taylor_gradients, width_requirements)
from vitprune.training.distributed import DistContext, all_reduce_sum

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
                                                                "matmuls), linear (Linear/Conv only) or tp "
                                                                "(torch-pruning's counter, as the HetDPT+ and "
                                                                "Isomorphic Pruning tables count).")
    importance: str = setting("magnitude", choices=IMPORTANCES,
                              help="magnitude (data-free) or taylor (needs training data).")
    #: Attention as Isomorphic Pruning's DeiT scripts prune it: whole heads at the ratio, and in the heads left the
    #: same head dimensions at half the ratio.
    heads: float = setting(1.0, min=0, max=1, help="Whole heads removed, as a share of the ratio (0: keep every "
                                                   "head).")
    head_dims: float = setting(0.5, min=0, max=1, help="Head dimensions removed from the heads left, as a share of "
                                                       "the ratio (0: none; 1: ranked with the other channels).")
    embed: bool = setting(True, help="Also prune the residual stream's channels.")
    isomorphic: bool = setting(True, flag="--isomorphic/--global",
                               help="Rank within groups of the same shape (Isomorphic Pruning) or all together.")
    round_to: int | None = setting(None, min=1, help="Keep every width a multiple of N (8: faster kernels).")
    #: Taylor importance's images: training images with the evaluation transform, as Isomorphic Pruning takes them.
    #: 16 x 64 = 1,024: where the pruned set's split-half agreement reaches about 0.9 on the digits model
    #: (benchmarks/taylor_stability.py; docs/width.md, "How many images taylor importance needs").
    taylor_batches: int = setting(16, min=1, help="Batches of --taylor-batch-size training images (evaluation "
                                                  "transform) for taylor importance.")
    taylor_batch_size: int = setting(64, min=1, help="Images per taylor-importance batch.")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    @property
    def requires(self) -> tuple[str, ...]:
        """What width pruning with these settings needs of a model's family."""
        return width_requirements(self.embed)

    def plan_options(self) -> dict[str, Any]:
        """The options :func:`~vitprune.methods.width.plan_width` plans with (the report's ``options``)."""
        return {"importance": self.importance, "heads": self.heads, "head_dims": self.head_dims, "embed": self.embed,
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
        check_attention_shares(self.heads, self.head_dims)
        for name in ("taylor_batches", "taylor_batch_size"):
            if getattr(self, name) < 1:
                raise VitpruneError(f"{name} must be at least 1, got {getattr(self, name)}")


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
    #: ``importance``, ``heads``, ``head_dims``, ``embed``, ``isomorphic`` and ``round_to``, as planned with.
    options: dict[str, Any]
    #: How many images taylor importance saw (``None``: magnitude importance).
    taylor_images: int | None
    #: What was removed (:meth:`~vitprune.methods.width.WidthPlan.to_dict`).
    plan: dict[str, Any]
    #: Params and MACs in the full and linear conventions, and in ``convention`` (tp's ``macs_tp``)
    #: (:meth:`~vitprune.measure.MacReport.totals`), before and after.
    before: dict[str, int]
    after: dict[str, int]
    #: The pruned model timed against the original (``None``: not measured).
    speed: dict[str, Any] | None


def run_width(model: nn.Module, config: WidthConfig, *, out: str | Path, train_set: Dataset | None = None,
              name: str | None = None, speed: SpeedConfig = SpeedConfig(), device: torch.device | str | None = None,
              progress: bool = False, dist: DistContext | None = None) -> WidthReport:
    """Width-prune a copy of ``model`` at ``config.ratio`` or to ``config.target_macs`` MACs per image (in
    ``config.convention``), as :func:`~vitprune.methods.width.plan_width` plans with the other settings, save it to
    ``out`` and time it against ``model``; returns the report (``name``: the starting checkpoint's, for the report).
    ``taylor`` importance takes ``config.taylor_batches`` shuffled batches of ``config.taylor_batch_size`` from
    ``train_set`` (give it the evaluation transform: the ranking should not depend on augmentation); their
    gradients are summed once and serve every plan. Under torchrun (``dist``) each process takes every
    ``world_size``-th of those batches and the gradients are summed over the processes, so every process plans
    what one process would; rank 0 alone saves and times."""
    config.validate()
    speed.validate()
    if config.importance == "taylor" and train_set is None:
        raise VitpruneError("taylor importance needs a training set")
    if device is None and dist is not None:
        device = dist.device
    options = config.plan_options()
    pruned = copy.deepcopy(model)
    taylor_images = None
    if config.importance == "taylor":
        sizes: list[int] = []
        options["gradients"] = taylor_gradients(
            pruned, _taylor_batches(train_set, config.taylor_batches, config.taylor_batch_size, dist, sizes))
        taylor_images = int(all_reduce_sum(torch.tensor(sum(sizes))).item())
    ratio, target_macs = config.ratio, config.target_macs
    if target_macs is not None:
        ratio, plan = prune_width_to_macs(pruned, target_macs, convention=config.convention, **options)
    else:
        plan = plan_width(pruned, ratio, **options)
        apply_width(pruned, plan)
    options.pop("gradients", None)
    report = WidthReport(model=name, out=str(out), ratio=ratio,
                         target_gmacs=None if target_macs is None else target_macs / 1e9,
                         convention=config.convention, options=options,
                         taylor_images=taylor_images, plan=plan.to_dict(),
                         before=count_macs(model, convention=config.convention).totals(),
                         after=count_macs(pruned, convention=config.convention).totals(), speed=None)
    return save_and_time(report, METADATA_KEY, pruned, model, speed, device=device, progress=progress)


def _taylor_batches(train_set: Dataset, batches: int, batch_size: int, dist: DistContext | None,
                    sizes: list[int]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This process's share of the first ``batches`` shuffled batches (the same shuffle on every process), streamed:
    the gradients are summed in one pass, so no batch is kept. Each batch's image count is appended to ``sizes``."""
    rank, world = (dist.rank, dist.world_size) if dist is not None else (0, 1)
    loader = build_loader(train_set, batch_size, shuffle=True, seed=0)
    for images, labels in itertools.islice(loader, rank, batches, world):
        sizes.append(len(labels))
        yield images, labels
