"""HetDPT's last step on its own: merge each fc1·fc2 pair whose activation went but that was kept apart.

A HetDPT run with ``merge`` off (``vitprune prune hetdpt --no-merge``) saves its depth-pruned model
with fc1 and fc2 apart, so that recovery elsewhere (``vitprune finetune``, a chain's fine-tune step)
trains the two linears as the paper's Stage 2 does. :func:`run_merge` then merges each pair into one
Linear (``W2 W1``, ``W2 b1 + b2``; exact up to float rounding) and saves base + recipe (the
``merge_mlp`` edits appended) + weights: ``vitprune prune merge``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.errors import VitpruneError
from vitprune.methods.hetdpt.config import MergeConfig
from vitprune.runs.context import MethodData, RunContext, method_run
from vitprune.runs.report import Report
from vitprune.runs.stages import finish_edit, open_model_out
from vitprune.surgery import merge_linear_mlps

#: The key of the report in the saved model's metadata.
METADATA_KEY = "merge"


@dataclass
class MergeReport(Report):
    """What :func:`run_merge` did and measured; the save's metadata holds its :meth:`to_dict` but for ``speed``."""

    #: The starting checkpoint's name, as the caller gave it (``None``: none given).
    model: str | None
    #: Where the merged model was saved.
    out: str
    #: Blocks whose fc1·fc2 were merged into one Linear.
    merged_blocks: list[int]
    fold_norm: bool
    #: Largest absolute difference between the outputs before and after merging, on two seeded random inputs
    #: (float32, eval mode): the merge's float rounding.
    max_abs_difference: float
    #: Params and MACs in both conventions (:meth:`~vitprune.measure.MacReport.totals`), before and after.
    before: dict[str, int]
    after: dict[str, int]
    #: The merged model timed against the unmerged one (``None``: not measured).
    speed: dict[str, Any] | None


@method_run
def run_merge(model: nn.Module, data: MethodData, config: MergeConfig, ctx: RunContext) -> MergeReport:
    """Merge every fc1·fc2 pair of a copy of ``model`` whose activation was removed but that was kept apart
    (:func:`~vitprune.surgery.merge_linear_mlps`; ``config.fold_norm`` also folds each norm2 affine into its
    Linear), save it to ``ctx.run_dir`` and time it against ``model``; returns the report (``ctx.name``: the starting
    checkpoint's). It reads no data.

    A model with no such pair is a one-line error: there is nothing to merge. Under torchrun every process
    merges its copy and gets the report, rank 0 alone saves and times.
    """
    ctx.speed.validate()
    merged = copy.deepcopy(model)
    blocks = merge_linear_mlps(merged, fold_norm=config.fold_norm)
    if not blocks:
        raise VitpruneError(f"{ctx.name or 'the model'} has no fc1·fc2 pair kept apart to merge (a model saved by "
                            "`vitprune prune hetdpt --no-merge` has one per activation it removed)")
    open_model_out(ctx)
    return finish_edit(MergeReport, METADATA_KEY, merged, model, ctx, merged_blocks=blocks,
                       fold_norm=config.fold_norm, max_abs_difference=_max_difference(model, merged))


@torch.no_grad()
def _max_difference(model: nn.Module, merged: nn.Module) -> float:
    """Largest ``|model(x) - merged(x)|`` over two seeded random images, both in eval mode (modes restored)."""
    param = next(model.parameters())
    x = torch.randn(2, *get_adapter(model).input_size, generator=torch.Generator().manual_seed(0))
    x = x.to(param.device, param.dtype)
    modes = model.training, merged.training
    try:
        return (model.eval()(x) - merged.eval()(x)).abs().max().item()
    finally:
        model.train(modes[0])
        merged.train(modes[1])
