"""Class-balanced, seeded subsets of a dataset (e.g. the "representative subset" HetDPT collects data on)."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset, Subset

from vitprune.errors import VitpruneError


def _targets(dataset: Dataset) -> list[int]:
    """The class label of every item of ``dataset``, in order.

    Read where vitprune's datasets keep them: ``labels`` (digits), ``targets`` (torchvision's
    CIFAR), ``reader.samples`` (timm's image folders).
    """
    if isinstance(dataset, Subset):
        inner = _targets(dataset.dataset)
        return [inner[i] for i in dataset.indices]
    for labels in (getattr(dataset, "labels", None), getattr(dataset, "targets", None)):
        if labels is not None:
            return [int(y) for y in labels]
    samples = getattr(getattr(dataset, "reader", None), "samples", None)
    if samples is not None:
        return [int(y) for _, y in samples]
    return [int(dataset[i][1]) for i in range(len(dataset))]


def balanced_subset(dataset: Dataset, size: int, seed: int) -> Subset:
    """``size`` items of ``dataset`` spread evenly over its classes, the same ones for the same ``seed``.

    Each class's items are shuffled with ``seed``; classes then take turns, in ascending label
    order, giving their next item until ``size`` are taken. So class counts differ by at most one
    (the lowest labels get the extras), except where a class runs out and the others make up
    for it. The indices are returned in dataset order; ``size >= len(dataset)`` gives all of it.
    Labels are read without loading images from digits, CIFAR and image folders (and ``Subset``
    views of them); any other dataset is read item by item once.
    """
    if size < 1:
        raise VitpruneError(f"subset size must be at least 1, got {size}")
    targets = torch.tensor(_targets(dataset))
    generator = torch.Generator().manual_seed(seed)
    keys = []
    for label in targets.unique().tolist():
        members = torch.nonzero(targets == label).flatten()
        members = members[torch.randperm(len(members), generator=generator)].tolist()
        keys += [(turn, label, index) for turn, index in enumerate(members)]
    chosen = sorted(index for _, _, index in sorted(keys)[:size])
    return Subset(dataset, chosen)
