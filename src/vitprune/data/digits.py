"""scikit-learn's handwritten digits, upscaled to 32x32: a tiny, offline classification task.

1797 grayscale 8x8 images ship inside scikit-learn, so tests and demos need no download. They
are upscaled bilinearly to 32x32, scaled to [0, 1] and normalised with fixed constants, then
split 80/20 with a fixed seed and stratification so every run and every process sees the same
train and validation images.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from vitprune.data.own import OwnTask
from vitprune.errors import VitpruneError

#: The digits task: 1x32x32 images of 10 classes, normalised by the upscaled training images' pixel statistics.
DIGITS = OwnTask(input_size=(1, 32, 32), num_classes=10, mean=0.3054, std=0.3237)
#: Fraction of the images held out for validation, and the seed of that split.
DIGITS_VAL_FRACTION = 0.2
DIGITS_SPLIT_SEED = 0
#: Largest random shift, in pixels of the 32x32 image, applied by training-time augmentation.
DIGITS_MAX_SHIFT = 2

DIGITS_SPLITS = ("train", "val")


@lru_cache(maxsize=1)
def _load_all() -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    # scikit-learn is imported here because importing it costs seconds and most commands never need it.
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    labels = torch.from_numpy(digits.target).long()
    images = torch.from_numpy(digits.images).float().div_(16.0).unsqueeze(1)  # raw pixels are 0..16
    images = F.interpolate(images, size=DIGITS.input_size[1:], mode="bilinear", align_corners=False)
    images = DIGITS.normalise(images)
    train_idx, val_idx = train_test_split(
        torch.arange(len(labels)).numpy(),
        test_size=DIGITS_VAL_FRACTION,
        random_state=DIGITS_SPLIT_SEED,
        stratify=digits.target,
    )
    return images, labels, {"train": torch.from_numpy(train_idx), "val": torch.from_numpy(val_idx)}


def load_digits_split(split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalised images ``[N, 1, 32, 32]`` (float32) and labels ``[N]`` (int64) of one split.

    The returned tensors are fresh copies; callers may modify them.
    """
    if split not in DIGITS_SPLITS:
        raise VitpruneError(f"unknown digits split {split!r} (expected one of: {', '.join(DIGITS_SPLITS)})")
    images, labels, indices = _load_all()
    idx = indices[split]
    return images[idx], labels[idx]


class DigitsDataset(Dataset):
    """One split of the digits task, held in memory; items are ``(image [1, 32, 32], label)``.

    With ``augment=True`` each item is shifted by a random whole number of pixels in
    ``[-DIGITS_MAX_SHIFT, DIGITS_MAX_SHIFT]`` along each axis, filling with background. Shifts
    are drawn from ``generator``, or, like torchvision's transforms, from torch's global RNG when
    it is ``None``: that RNG is what DataLoader workers seed from the loader's generator and what
    :func:`vitprune.training.fit` seeds, so either way a seeded run is reproducible.
    """

    def __init__(self, split: str, *, augment: bool = False, generator: torch.Generator | None = None) -> None:
        images, self.labels = load_digits_split(split)
        self.split = split
        self.augment = augment
        if augment:
            # Padding once up front turns every shift into a cheap crop of the padded image.
            background = DIGITS.normalise(0.0)
            images = F.pad(images, (DIGITS_MAX_SHIFT,) * 4, value=background)
        self.images = images
        self.generator = generator

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = self.images[index]
        if self.augment:
            top, left = torch.randint(0, 2 * DIGITS_MAX_SHIFT + 1, (2,), generator=self.generator).tolist()
            _, height, width = DIGITS.input_size
            image = image[:, top : top + height, left : left + width]
        return image, int(self.labels[index])
