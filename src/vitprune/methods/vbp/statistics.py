"""VBP Step 1: per-neuron mean and unbiased variance of every MLP's hidden activations.

Every token of every image is one sample (the folded bias is added to every token, so the mean
that makes compensation exact is the mean over all tokens, class and distillation tokens
included). The statistics are merged batch by batch with Chan et al.'s exact formula in float64
(:func:`vitprune.training.distributed.welford_update`), so any batch split gives the same result,
and across processes with :func:`~vitprune.training.distributed.reduce_moments`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from vitprune.adapters import BlockView, get_adapter
from vitprune.errors import VitpruneError
from vitprune.training.distributed import DistContext, empty_moments, reduce_moments, welford_update
from vitprune.training.progress import track_batches

#: Where the statistics are taken: ``post`` = the input of fc2 (after the activation, the paper's
#: choice); ``pre`` = the output of fc1 (before it, the paper's Table 7 ablation).
PLACES = ("post", "pre")


@dataclass
class NeuronStats:
    """Statistics of one MLP's hidden neurons: sample count, mean and unbiased variance (float64)."""

    count: int
    mean: torch.Tensor
    var: torch.Tensor


def mlp_statistics(model: nn.Module, loader: Iterable[tuple[torch.Tensor, torch.Tensor]], *, place: str = "post",
                   max_batches: int | None = None, progress: bool = False,
                   dist: DistContext | None = None) -> dict[int, NeuronStats]:
    """Mean and unbiased variance of every hidden neuron of every MLP that has them, by block index.

    One pass over ``loader`` (its first ``max_batches``) in eval mode without gradients. With
    ``dist`` every process passes over its own shard and the statistics are merged over all
    processes, so every process returns the same values.
    """
    if place not in PLACES:
        raise VitpruneError(f"unknown statistics place {place!r} (choose from: {', '.join(PLACES)})")
    views = hidden_mlps(model)
    device = next(model.parameters()).device
    moments = {v.index: empty_moments(v.mlp.hidden_features, device) for v in views}

    def record(index: int):
        def hook(_module, args, output=None):
            moments[index] = welford_update(*moments[index], args[0] if place == "post" else output)
        return hook

    handles = [v.mlp.fc2.register_forward_pre_hook(record(v.index)) if place == "post"
               else v.mlp.fc1.register_forward_hook(record(v.index)) for v in views]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            for images, _ in track_batches(loader, "activation statistics", max_batches=max_batches,
                                           enabled=progress):
                model(images.to(device))
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    result = {}
    for index, state in moments.items():
        count, mean, m2 = reduce_moments(*state) if dist is not None else state
        if count.item() < 2:
            raise VitpruneError(f"variance needs at least 2 samples, got {int(count.item())}")
        result[index] = NeuronStats(count=int(count.item()), mean=mean, var=m2 / (count - 1))
    return result


def hidden_mlps(model: nn.Module) -> list[BlockView]:
    """The views of every block whose MLP still has hidden neurons (not merged into one Linear, nor cut to none, as
    HiAP leaves a closed FFN block)."""
    views = [v for v in get_adapter(model).blocks() if not v.mlp.merged and v.mlp.hidden_features > 0]
    if not views:
        raise VitpruneError("the model has no MLP with hidden neurons")
    return views
