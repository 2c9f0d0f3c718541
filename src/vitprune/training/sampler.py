"""A seeded, rank-aware sampler that can start mid-epoch, so a resumed run sees exactly the data it would have,
and the per-sample seeding that makes augmentation independent of loader workers, processes and resumes."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler


class ResumableSampler(Sampler[int]):
    """Indices of one epoch: a permutation seeded by ``seed + epoch``, this rank's share, from ``start`` on.

    Every rank computes the same permutation and takes every ``world_size``-th index from position
    ``rank``, padding by wrap-around so all ranks get the same count (as ``DistributedSampler`` does).
    Skipping happens here, before any sample is loaded, so resuming does not consume the random
    state that data augmentation draws from.

    ``repeats`` > 1 is repeated augmentation (DeiT's ``RASampler``, timm's ``RepeatAugSampler``): each
    index of the permutation appears ``repeats`` times in a row before the ranks take their turns, so
    the copies of an image land on different processes (under one process, in the same batch), each
    augmented differently; an epoch stays ``ceil(num_samples / world_size)`` indices per rank, so it
    covers about ``1 / repeats`` of the distinct images. (DeiT also rounds the epoch down to a multiple
    of 256 images; here it is not rounded, which changes an ImageNet epoch by less than 0.02%.)

    ``seeded`` yields ``(index, sample_seed)`` pairs for :class:`SeededSamples`: the seed belongs to the
    position in the epoch's order, so an image's augmentation depends on the run's seed, the epoch and that
    position alone, not on the rank that loads it, the worker process or whether the run was resumed.
    """

    def __init__(self, num_samples: int, *, shuffle: bool, seed: int, rank: int = 0, world_size: int = 1,
                 repeats: int = 1, seeded: bool = False) -> None:
        if num_samples < 1:
            raise ValueError("cannot sample from an empty dataset")
        if repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {repeats}")
        self.num_samples, self.shuffle, self.seed = num_samples, shuffle, seed
        self.rank, self.world_size, self.repeats, self.seeded = rank, world_size, repeats, seeded
        self.per_rank = -(-num_samples // world_size)
        self.epoch, self.start = 0, 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Select the epoch's permutation and skip this rank's first ``start`` indices."""
        self.epoch, self.start = epoch, start

    def _indices(self) -> list[Any]:
        if self.shuffle:
            order = torch.randperm(self.num_samples, generator=torch.Generator().manual_seed(self.seed + self.epoch))
        else:
            order = torch.arange(self.num_samples)
        order = order.repeat_interleave(self.repeats).tolist()
        if self.seeded:
            # One more stream than the permutation's (offset by 2**32), drawn whole, so every rank holds the same seeds.
            seeds = torch.randint(2**62, (len(order),),
                                  generator=torch.Generator().manual_seed(self.seed + self.epoch + 2**32)).tolist()
            order = list(zip(order, seeds))
        total = -(-len(order) // self.world_size) * self.world_size
        # Wrapping around pads even when there are fewer indices than processes.
        return [order[i % len(order)] for i in range(self.rank, total, self.world_size)][:self.per_rank]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._indices()[self.start:])

    def __len__(self) -> int:
        return self.per_rank - self.start


class SeededSamples(Dataset):
    """``dataset`` read by ``(index, sample_seed)`` keys (:class:`ResumableSampler` with ``seeded``): each item's
    random transform runs with Python's, NumPy's and torch's generators seeded by ``sample_seed``, and the
    caller's generator states are put back afterwards, so the model's own randomness (dropout, mixup) is
    untouched and loader workers draw exactly what the main process would."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int]) -> Any:
        index, sample_seed = key
        states = random.getstate(), np.random.get_state(), torch.get_rng_state()
        try:
            random.seed(sample_seed)
            np.random.seed(sample_seed % 2**32)
            torch.manual_seed(sample_seed)
            return self.dataset[index]
        finally:
            random.setstate(states[0])
            np.random.set_state(states[1])
            torch.set_rng_state(states[2])
