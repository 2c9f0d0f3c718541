"""Which MLP neurons to remove: VBP's post-activation variance and the paper's baselines (Tables 3, 6 and 7).

Every criterion gives one score per hidden neuron of every MLP (lower = removed first), ranked
globally by :func:`~vitprune.methods.vbp.selection.select_neurons`, so all of them produce the
same architecture at the same ratio, as in the paper's tables. Whether the removed neurons' means
are folded into the next bias is a separate choice (:func:`~vitprune.methods.vbp.selection.prune_by_selection`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from vitprune.errors import VitpruneError
from vitprune.methods.vbp.config import CRITERIA
from vitprune.methods.vbp.statistics import NeuronStats, hidden_mlps, mlp_statistics
from vitprune.training.distributed import DistContext, all_reduce_sum
from vitprune.training.progress import track_batches


def magnitude_scores(model: nn.Module) -> dict[int, torch.Tensor]:
    """L2 norm of every hidden neuron's parameters: its fc1 row and bias and its fc2 column (float64).

    All of a neuron's parameters, as Torch-Pruning's group magnitude importance takes every
    parameter a removed channel takes with it; the paper's structured adaptation is unspecified.
    """
    scores = {}
    for view in hidden_mlps(model):
        fc1, fc2 = view.mlp.fc1, view.mlp.fc2
        squares = fc1.weight.detach().double().square().sum(1) + fc2.weight.detach().double().square().sum(0)
        if fc1.bias is not None:
            squares += fc1.bias.detach().double().square()
        scores[view.index] = squares.sqrt().cpu()
    return scores


def random_scores(model: nn.Module, seed: int) -> dict[int, torch.Tensor]:
    """Uniform random scores, reproducible from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    return {v.index: torch.rand(v.mlp.hidden_features, generator=generator, dtype=torch.float64)
            for v in hidden_mlps(model)}


def snip_scores(model: nn.Module, loader: Iterable[tuple[torch.Tensor, torch.Tensor]], *,
                max_batches: int | None = None, progress: bool = False,
                dist: DistContext | None = None) -> dict[int, torch.Tensor]:
    """SNIP's connection sensitivity of a gate on each hidden neuron: ``|Σ ∂L/∂g|`` at ``g = 1`` (float64).

    A gate ``g`` multiplies the neuron's activation where it enters fc2, so ``∂L/∂g = Σ (∂L/∂h)·h``
    over every token. ``L`` is the cross-entropy summed over the samples of the first
    ``max_batches`` batches (summed, not averaged, so the batch split does not matter); with
    ``dist`` the gradients are summed over all processes. Eval mode; the weights get no gradients.
    """
    views = hidden_mlps(model)
    device = next(model.parameters()).device
    gates = {v.index: torch.ones(v.mlp.hidden_features, device=device, requires_grad=True) for v in views}
    totals = {index: torch.zeros(len(g), dtype=torch.float64, device=device) for index, g in gates.items()}

    def gate(index: int):
        def hook(_module, args):
            return (args[0] * gates[index], *args[1:])
        return hook

    handles = [v.mlp.fc2.register_forward_pre_hook(gate(v.index)) for v in views]
    was_training = model.training
    try:
        model.eval()
        for images, labels in track_batches(loader, "SNIP sensitivity", max_batches=max_batches, enabled=progress):
            loss = F.cross_entropy(model(images.to(device)), labels.to(device), reduction="sum")
            grads = torch.autograd.grad(loss, list(gates.values()))
            for index, grad in zip(gates, grads, strict=True):
                totals[index] += grad.double()
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    if dist is not None:
        totals = {index: all_reduce_sum(t) for index, t in totals.items()}
    return {index: t.abs().cpu() for index, t in totals.items()}


def neuron_scores(model: nn.Module, criterion: str, loader: Iterable[tuple[torch.Tensor, torch.Tensor]] | None = None,
                  *, stats: dict[int, NeuronStats] | None = None, max_batches: int | None = None, seed: int = 0,
                  progress: bool = False, dist: DistContext | None = None) -> dict[int, torch.Tensor]:
    """Scores of ``criterion`` (:data:`CRITERIA`) for every hidden neuron, by block index.

    ``variance`` and ``mean`` use ``stats`` when given (post-activation statistics, e.g. those computed for
    the compensation anyway), else pass over ``loader``; ``pre-variance`` and ``snip`` pass over
    ``loader`` (its first ``max_batches``); ``magnitude`` and ``random`` need no data.
    """
    if criterion not in CRITERIA:
        raise VitpruneError(f"unknown criterion {criterion!r} (choose from: {', '.join(CRITERIA)})")
    if criterion == "magnitude":
        return magnitude_scores(model)
    if criterion == "random":
        return random_scores(model, seed)
    if criterion in ("variance", "mean") and stats is not None:
        return {index: _post_score(s, criterion) for index, s in stats.items()}
    if loader is None:
        raise VitpruneError(f"the {criterion} criterion needs data")
    if criterion == "snip":
        return snip_scores(model, loader, max_batches=max_batches, progress=progress, dist=dist)
    place = "pre" if criterion == "pre-variance" else "post"
    computed = mlp_statistics(model, loader, place=place, max_batches=max_batches, progress=progress, dist=dist)
    return {index: _post_score(s, criterion) for index, s in computed.items()}


def _post_score(stats: NeuronStats, criterion: str) -> torch.Tensor:
    return (stats.mean.abs() if criterion == "mean" else stats.var).cpu()
