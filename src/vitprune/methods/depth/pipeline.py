"""``vitprune prune depth`` as a function: prune a copy, save it with its report in the metadata, time it."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from torch import nn

from vitprune.methods.depth.config import DepthConfig
from vitprune.runs.context import MethodData, RunContext, method_run
from vitprune.runs.report import Report
from vitprune.runs.stages import finish_edit, open_model_out
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


@method_run
def run_depth(model: nn.Module, data: MethodData, config: DepthConfig, ctx: RunContext) -> DepthReport:
    """Remove the attention of blocks ``config.attention`` and the activation of blocks ``config.activation`` from a
    copy of ``model`` (:func:`~vitprune.surgery.prune_depth`), save it to ``ctx.run_dir`` and time it against
    ``model``; returns the report (``ctx.name``: the starting checkpoint's, for the report). It reads no data. Under
    torchrun every process prunes its copy, rank 0 alone saves and times, and every process returns the same
    report."""
    config.validate()
    ctx.speed.validate()
    open_model_out(ctx)
    pruned = copy.deepcopy(model)
    prune_depth(pruned, config.attention, config.activation, identity=config.identity, fold_norm=config.fold_norm,
                output_gelu=config.output_gelu)
    return finish_edit(DepthReport, METADATA_KEY, pruned, model, ctx,
                       **{**config.to_dict(), "attention": sorted(config.attention),
                          "activation": sorted(config.activation)})
