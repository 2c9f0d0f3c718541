"""ResumableSampler: DistributedSampler's order without repeats, timm's RepeatAugSampler's (DeiT's RASampler) with
them, and a mid-epoch start that continues exactly."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from timm.data.distributed_sampler import RepeatAugSampler
from torch.utils.data import DistributedSampler

from vitprune.training.sampler import ResumableSampler

SIZES = st.tuples(st.integers(1, 60), st.integers(1, 4), st.integers(0, 3))  # images, processes, epoch


def _ranks(num_samples: int, world_size: int, epoch: int, **kwargs) -> list[list[int]]:
    samplers = [ResumableSampler(num_samples, shuffle=True, seed=0, rank=r, world_size=world_size, **kwargs)
                for r in range(world_size)]
    for sampler in samplers:
        sampler.set_epoch(epoch)
    return [list(sampler) for sampler in samplers]


@given(SIZES)
def test_without_repeats_each_rank_gets_what_distributed_sampler_gives(sizes):
    num_samples, world_size, epoch = sizes
    data = range(num_samples)
    expected = []
    for rank in range(world_size):
        reference = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
        reference.set_epoch(epoch)
        expected.append(list(reference))
    assert _ranks(num_samples, world_size, epoch) == expected


@given(SIZES, st.integers(2, 4))
def test_repeats_give_what_timms_repeat_aug_sampler_gives(sizes, repeats):
    """timm's sampler (DeiT's RASampler) seeds its permutation with the epoch, as ours does with seed 0; with
    ``selected_round=0`` it keeps ``ceil(images / processes)`` indices per rank, as ours does."""
    num_samples, world_size, epoch = sizes
    expected = []
    for rank in range(world_size):
        reference = RepeatAugSampler(range(num_samples), num_replicas=world_size, rank=rank, num_repeats=repeats,
                                     selected_round=0)
        reference.set_epoch(epoch)
        expected.append(list(reference))
    assert _ranks(num_samples, world_size, epoch, repeats=repeats) == expected


def test_repeated_copies_land_on_different_processes():
    """Three processes, three repeats: each rank sees the same images, in the same order, each once."""
    ranks = _ranks(30, 3, epoch=1, repeats=3)
    assert ranks[0] == ranks[1] == ranks[2]
    assert len(set(ranks[0])) == len(ranks[0]) == 10
    order = torch.randperm(30, generator=torch.Generator().manual_seed(1)).tolist()
    assert ranks[0] == order[:10]


def test_under_one_process_the_copies_are_consecutive():
    (indices,) = _ranks(12, 1, epoch=0, repeats=3)
    order = torch.randperm(12, generator=torch.Generator().manual_seed(0)).tolist()
    assert indices == [i for i in order[:4] for _ in range(3)]


@given(SIZES, st.integers(1, 3), st.data())
def test_a_mid_epoch_start_continues_the_epoch(sizes, repeats, data):
    num_samples, world_size, epoch = sizes
    full = _ranks(num_samples, world_size, epoch, repeats=repeats)
    rank = data.draw(st.integers(0, world_size - 1))
    start = data.draw(st.integers(0, len(full[rank])))
    sampler = ResumableSampler(num_samples, shuffle=True, seed=0, rank=rank, world_size=world_size, repeats=repeats)
    sampler.set_epoch(epoch, start=start)
    assert list(sampler) == full[rank][start:] and len(sampler) == len(full[rank]) - start


def test_repeats_must_be_positive():
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        ResumableSampler(10, shuffle=True, seed=0, repeats=0)
