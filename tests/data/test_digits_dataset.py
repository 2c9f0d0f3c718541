"""The built-in digits task: sizes, fixed stratified split, normalisation and shift augmentation."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from vitprune.data import DIGITS, DigitsDataset, load_digits_split
from vitprune.errors import VitpruneError

# Images per class in scikit-learn's digits, and in our 20% validation split.
CLASS_TOTALS = [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
VAL_COUNTS = [36, 36, 35, 37, 36, 37, 36, 36, 35, 36]
BACKGROUND = (0.0 - DIGITS.mean) / DIGITS.std


def test_split_sizes_shapes_and_dtypes():
    train_x, train_y = load_digits_split("train")
    val_x, val_y = load_digits_split("val")
    assert train_x.shape == (1437, *DIGITS.input_size) and val_x.shape == (360, *DIGITS.input_size)
    assert train_x.dtype == val_x.dtype == torch.float32
    assert train_y.dtype == val_y.dtype == torch.int64
    assert train_y.shape == (1437,) and val_y.shape == (360,)


def test_split_is_stratified():
    _, train_y = load_digits_split("train")
    _, val_y = load_digits_split("val")
    assert torch.bincount(val_y).tolist() == VAL_COUNTS
    assert torch.bincount(train_y).tolist() == [t - v for t, v in zip(CLASS_TOTALS, VAL_COUNTS)]


def test_split_is_identical_across_calls():
    a_x, a_y = load_digits_split("val")
    a_x.zero_()  # callers get copies: mutating one must not leak into the next call
    b_x, b_y = load_digits_split("val")
    c_x, c_y = load_digits_split("val")
    assert torch.equal(b_x, c_x) and torch.equal(a_y, b_y)
    assert b_x.abs().sum() > 0


@pytest.mark.slow
def test_split_is_identical_across_processes():
    code = (
        "from vitprune.data import load_digits_split\n"
        "x, y = load_digits_split('val')\n"
        "print(y.tolist(), round(float(x.sum()), 2))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    x, y = load_digits_split("val")
    assert out == f"{y.tolist()} {round(float(x.sum()), 2)}"


def test_training_images_are_normalised():
    train_x, _ = load_digits_split("train")
    assert abs(train_x.mean().item()) < 1e-3
    assert abs(train_x.std().item() - 1.0) < 1e-3
    # Blank corners of the digits map to the background value exactly.
    assert train_x[:, 0, 0, 0].eq(BACKGROUND).all()


def test_unknown_split():
    with pytest.raises(VitpruneError, match=r"^unknown digits split 'test' \(expected one of: train, val\)$"):
        load_digits_split("test")


def test_dataset_items_without_augmentation():
    ds = DigitsDataset("val")
    images, labels = load_digits_split("val")
    assert len(ds) == 360
    image, label = ds[7]
    assert type(label) is int and label == labels[7].item()
    assert torch.equal(image, images[7])


def _shift(image: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """``image`` moved down ``dy`` and right ``dx`` pixels, filling with background."""
    padded = F.pad(image, (2, 2, 2, 2), value=BACKGROUND)
    return padded[:, 2 - dy : 34 - dy, 2 - dx : 34 - dx]


def _find_shift(augmented: torch.Tensor, clean: torch.Tensor) -> tuple[int, int] | None:
    for dy in range(-2, 3):
        for dx in range(-2, 3):
            if torch.equal(augmented, _shift(clean, dy, dx)):
                return dy, dx
    return None


def test_augmentation_is_a_shift_of_at_most_two_pixels():
    clean = DigitsDataset("train")
    augmented = DigitsDataset("train", augment=True, generator=torch.Generator().manual_seed(0))
    shifts = [_find_shift(augmented[i][0], clean[i][0]) for i in range(300)]
    assert None not in shifts
    assert [augmented[i][1] for i in range(5)] == [clean[i][1] for i in range(5)]
    # All 25 shifts, the identity included, appear in 300 draws (a miss would have odds of about 1e-4).
    assert len(set(shifts)) == 25


def test_augmentation_is_deterministic_given_a_generator():
    def draw(seed):
        ds = DigitsDataset("train", augment=True, generator=torch.Generator().manual_seed(seed))
        return torch.stack([ds[i][0] for i in range(20)])

    assert torch.equal(draw(3), draw(3))
    assert not torch.equal(draw(3), draw(4))


def test_augmentation_uses_torch_global_rng_without_a_generator():
    ds = DigitsDataset("train", augment=True)
    torch.manual_seed(5)
    first = torch.stack([ds[i][0] for i in range(20)])
    torch.manual_seed(5)
    second = torch.stack([ds[i][0] for i in range(20)])
    assert torch.equal(first, second)
