"""``vitprune prune width`` as a function: plan with torch-pruning (by a ratio or to a MAC target), cut a copy by
recorded edits, save it with its report in the metadata, time it."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from vitprune.data import build_loader
from vitprune.errors import VitpruneError
from vitprune.methods.width.config import WidthConfig
from vitprune.methods.width.isomorphic import apply_width, plan_width, prune_width_to_macs, taylor_gradients
from vitprune.runs.context import MethodData, RunContext, method_run
from vitprune.runs.report import Report
from vitprune.runs.stages import finish_edit, open_model_out
from vitprune.training.distributed import DistContext, all_reduce_sum

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


@method_run
def run_width(model: nn.Module, data: MethodData, config: WidthConfig, ctx: RunContext) -> WidthReport:
    """Width-prune a copy of ``model`` at ``config.ratio`` or to ``config.target_macs`` (a
    :class:`~vitprune.measure.MacTarget`, in ``config.convention``), as :func:`~vitprune.methods.width.plan_width`
    plans with the other settings, save it to ``ctx.run_dir`` and time it against ``model``; returns the report
    (``ctx.name``: the starting checkpoint's, for the report). ``taylor`` importance takes ``config.taylor_batches``
    shuffled batches of ``config.taylor_batch_size`` from ``data.calibration`` (default ``data.train``; give it the
    evaluation transform: the ranking should not depend on augmentation); their gradients are summed once and serve
    every plan. Under torchrun each process takes every ``world_size``-th of those batches and the gradients are
    summed over the processes, so every process plans what one process would; rank 0 alone saves and times."""
    config.validate()
    ctx.speed.validate()
    train_set = data.calibration_or_train
    if config.importance == "taylor" and train_set is None:
        raise VitpruneError("taylor importance needs training images (--data)")
    open_model_out(ctx)
    options = config.plan_options()
    pruned = copy.deepcopy(model)
    taylor_images = None
    if config.importance == "taylor":
        sizes: list[int] = []
        options["gradients"] = taylor_gradients(
            pruned, _taylor_batches(train_set, config.taylor_batches, config.taylor_batch_size, config.seed,
                                    ctx.dist, sizes))
        taylor_images = int(all_reduce_sum(torch.tensor(sum(sizes))).item())
    ratio, target = config.ratio, config.target_macs
    if target is not None:
        ratio, plan = prune_width_to_macs(pruned, target, above=config.above, **options)
    else:
        plan = plan_width(pruned, ratio, **options)
        apply_width(pruned, plan)
    options.pop("gradients", None)
    return finish_edit(WidthReport, METADATA_KEY, pruned, model, ctx, ratio=ratio,
                       target_gmacs=None if target is None else target.resolve(model) / 1e9,
                       convention=config.convention, options=options, taylor_images=taylor_images,
                       plan=plan.to_dict())


def _taylor_batches(train_set: Dataset, batches: int, batch_size: int, seed: int, dist: DistContext | None,
                    sizes: list[int]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This process's share of the first ``batches`` shuffled batches (the same shuffle on every process), streamed:
    the gradients are summed in one pass, so no batch is kept. Each batch's image count is appended to ``sizes``."""
    rank, world = (dist.rank, dist.world_size) if dist is not None else (0, 1)
    loader = build_loader(train_set, batch_size, shuffle=True, seed=seed)
    for images, labels in itertools.islice(loader, rank, batches, world):
        sizes.append(len(labels))
        yield images, labels
