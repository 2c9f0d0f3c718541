"""Transfer entropy (TE): how much removing one layer changes the entropy of the model's final features.

HetDPT chooses the next layer to remove by TE (from NOSE, Lin et al. 2024) without defining it.
This is NOSE's reading: under a Gaussian assumption the entropy of the pre-logit features ``Y``
(:meth:`~vitprune.adapters.ViTAdapter.pre_logits`: the normalised class token, the pooled patch
tokens, or the mean of a distilled DeiT's two tokens) over a set of images is, constants dropped,
``H(Y) = Σ_d log σ_d`` (``σ_d`` the population standard deviation of feature ``d``), and a layer
``l`` of a model that already lacks the layers ``S`` scores ``TE(l | S) = |H(Y_S) - H(Y_{S ∪ {l}})|``.
The layers in ``S`` are the ones surgery removed; ``l`` is removed by masking it in a gated copy
(:func:`~vitprune.surgery.add_depth_gates`), which computes exactly what
:func:`~vitprune.surgery.prune_depth` would build. The paper fixes neither the sign nor the
features, so the definition is pluggable: ``signed=True`` keeps the sign (positive: removing
``l`` lowers the entropy). A low TE marks a layer whose removal changes the output distribution
least.

Every layer is scored on the same images: the loader is read once (up to ``max_images``) and its
batches are kept, as the loader yields them, for every pass. A shuffling or augmenting loader
thus still gives one fixed set of images per call, at the memory cost of holding them.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Iterator, Sequence

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.errors import VitpruneError
from vitprune.methods.hetdpt.analysis import LAYER_TYPES
from vitprune.surgery import add_depth_gates, check_depth_layers, remaining_layers
from vitprune.training.distributed import DistContext, Moments, empty_moments, reduce_moments, welford_update

Batches = Iterable[tuple[torch.Tensor, torch.Tensor]]


@torch.no_grad()
def feature_entropy(model: nn.Module, loader: Batches, *, max_images: int | None = None,
                    dist: DistContext | None = None) -> float:
    """Gaussian entropy proxy ``Σ_d log σ_d`` of ``model``'s pre-logit features over ``loader``'s images.

    The model runs in eval mode (its mode is restored afterwards) over the first ``max_images``
    images. Per-feature moments are accumulated in float64; with ``dist`` every process passes its
    own shard (``max_images`` then counts this process's images) and the moments are merged over
    all processes, so every process returns the same value.
    """
    adapter = get_adapter(model)
    device = next(model.parameters()).device
    moments: Moments = empty_moments(adapter.num_features, device)
    was_training = model.training
    model.eval()
    try:
        for images, _ in _take(loader, max_images):
            moments = welford_update(*moments, adapter.pre_logits(images.to(device)))
    finally:
        model.train(was_training)
    if dist is not None:
        moments = reduce_moments(*moments)
    count, _, m2 = moments
    if count < 2:
        raise VitpruneError(f"feature entropy needs at least 2 images, got {int(count)}")
    variance = m2 / count
    if not bool((variance > 0).all()):
        raise VitpruneError(f"{int((variance == 0).sum())} feature(s) are constant over the {int(count)} images, "
                            "so the entropy is -inf")
    return 0.5 * variance.log().sum().item()


def transfer_entropy(model: nn.Module, kind: str, loader: Batches, *, candidates: Sequence[int] | None = None,
                     identity: str = "norm", output_gelu: bool = False, max_images: int | None = None,
                     signed: bool = False, dist: DistContext | None = None) -> dict[int, float]:
    """``TE(l | S)`` of every remaining layer of ``kind`` (``"attention"`` or ``"activation"``), by block.

    ``candidates`` restricts it to those blocks. ``identity`` and ``output_gelu`` say what a removed
    layer leaves (as for :func:`~vitprune.surgery.prune_depth`); ``signed`` keeps the sign of the
    difference (see the module docstring). ``max_images`` and ``dist`` are :func:`feature_entropy`'s.
    The model is not modified.
    """
    if kind not in LAYER_TYPES:
        raise VitpruneError(f"unknown layer type {kind!r} (choose from: {', '.join(LAYER_TYPES)})")
    if candidates is None:
        blocks = remaining_layers(model)[kind]
    else:
        blocks = check_depth_layers(model, **{kind: candidates})[LAYER_TYPES.index(kind)]
    scores = _scores(model, [(kind, b) for b in blocks], loader, identity=identity, output_gelu=output_gelu,
                     max_images=max_images, signed=signed, dist=dist)
    return {block: score for _, block, score in scores}


def rank_layers(model: nn.Module, loader: Batches, *, kinds: Sequence[str] = LAYER_TYPES, identity: str = "norm",
                output_gelu: bool = False, max_images: int | None = None, signed: bool = False,
                dist: DistContext | None = None) -> list[tuple[str, int, float]]:
    """``(kind, block, TE)`` of every remaining layer of ``kinds``, lowest TE first: HetDPT's "TE-static".

    One pass from the current model: every TE is relative to the same ``S``, so with both kinds
    this is a joint ranking across types (ties keep the order of ``kinds``, then of blocks). The
    other arguments are :func:`transfer_entropy`'s.
    """
    unknown = [k for k in kinds if k not in LAYER_TYPES]
    if unknown:
        raise VitpruneError(f"unknown layer type {unknown[0]!r} (choose from: {', '.join(LAYER_TYPES)})")
    remaining = remaining_layers(model)
    layers = [(kind, block) for kind in dict.fromkeys(kinds) for block in remaining[kind]]
    scores = _scores(model, layers, loader, identity=identity, output_gelu=output_gelu, max_images=max_images,
                     signed=signed, dist=dist)
    return sorted(scores, key=lambda row: row[2])


def _scores(model: nn.Module, layers: list[tuple[str, int]], loader: Batches, *, identity: str, output_gelu: bool,
            max_images: int | None, signed: bool, dist: DistContext | None) -> list[tuple[str, int, float]]:
    """TE of each ``(kind, block)`` in ``layers``, masked one at a time in a gated copy, on one fixed image set."""
    batches = list(_take(loader, max_images))
    work = copy.deepcopy(model).eval()
    gates = add_depth_gates(work, identity=identity, output_gelu=output_gelu)
    base = feature_entropy(work, batches, dist=dist)
    scores = []
    for kind, block in layers:
        gate = getattr(gates, kind)[block]
        gate.set(False)
        try:
            difference = base - feature_entropy(work, batches, dist=dist)
        except VitpruneError:
            # Without this layer the features no longer depend on the image (e.g. the last attention
            # gone, the class token never sees a patch): the entropy drop is unbounded.
            difference = math.inf
        gate.set(True)
        scores.append((kind, block, difference if signed else abs(difference)))
    return scores


def _take(loader: Batches, max_images: int | None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``loader``'s batches up to ``max_images`` images in all, the last one cut short."""
    if max_images is not None and max_images < 1:
        raise VitpruneError(f"max_images must be at least 1, got {max_images}")
    seen = 0
    for images, targets in loader:
        if max_images is not None:
            images, targets = images[:max_images - seen], targets[:max_images - seen]
        seen += len(images)
        yield images, targets
        if max_images is not None and seen >= max_images:
            return
