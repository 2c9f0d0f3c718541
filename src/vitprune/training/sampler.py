"""A seeded, rank-aware sampler that can start mid-epoch, so a resumed run sees exactly the data it would have."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler


class ResumableSampler(Sampler[int]):
    """Indices of one epoch: a permutation seeded by ``seed + epoch``, this rank's share, from ``start`` on.

    Every rank computes the same permutation and takes every ``world_size``-th index from position
    ``rank``, padding by wrap-around so all ranks get the same count (as ``DistributedSampler`` does).
    Skipping happens here, before any sample is loaded, so resuming does not consume the random
    state that data augmentation draws from.
    """

    def __init__(self, num_samples: int, *, shuffle: bool, seed: int, rank: int = 0, world_size: int = 1) -> None:
        if num_samples < 1:
            raise ValueError("cannot sample from an empty dataset")
        self.num_samples, self.shuffle, self.seed = num_samples, shuffle, seed
        self.rank, self.world_size = rank, world_size
        self.per_rank = -(-num_samples // world_size)
        self.epoch, self.start = 0, 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Select the epoch's permutation and skip this rank's first ``start`` indices."""
        self.epoch, self.start = epoch, start

    def _indices(self) -> list[int]:
        if self.shuffle:
            order = torch.randperm(self.num_samples, generator=torch.Generator().manual_seed(self.seed + self.epoch))
            order = order.tolist()
        else:
            order = list(range(self.num_samples))
        total = self.per_rank * self.world_size
        order += order[: total - len(order)]
        return order[self.rank:total:self.world_size]

    def __iter__(self) -> Iterator[int]:
        return iter(self._indices()[self.start:])

    def __len__(self) -> int:
        return self.per_rank - self.start
