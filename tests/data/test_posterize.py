"""RandAugment's posterize at 0 bits: a black image, as under Pillow < 13, rather than Pillow 13's ValueError, which
stopped DeiT's ``rand-m9-mstd0.5-inc1`` recipe within an ImageNet epoch."""

from __future__ import annotations

import random

import pytest
import torch
from PIL import Image, ImageOps
from timm.data.auto_augment import AutoAugment, RandAugment
from timm.data.auto_augment import posterize as timm_posterize

from vitprune.data import build_dataset
from vitprune.data.datasets import posterize


@pytest.fixture
def noise() -> Image.Image:
    return Image.fromarray(torch.randint(0, 256, (12, 10, 3), generator=torch.Generator().manual_seed(0),
                                         dtype=torch.uint8).numpy())


@pytest.mark.parametrize("bits", [1, 2, 4, 7])
def test_posterize_keeps_the_top_bits_as_pillow_does(noise, bits):
    assert posterize(noise, bits).tobytes() == ImageOps.posterize(noise, bits).tobytes()


def test_posterize_at_8_bits_is_the_image_and_at_0_bits_black(noise):
    assert posterize(noise, 8) is noise
    for bits in (0, -1):
        black = posterize(noise, bits)
        assert black.mode == noise.mode and black.size == noise.size and not any(black.tobytes())


def _folder(tmp_path):
    for c in range(2):
        (tmp_path / "train" / f"c{c}").mkdir(parents=True)
        Image.new("RGB", (20, 20), (200, 90 * c, 30)).save(tmp_path / "train" / f"c{c}" / "0.png")
    return str(tmp_path)


@pytest.mark.parametrize("policy", ["rand-n3-m10-mstd0-inc1", "v0"])
def test_policies_that_keep_0_bits_run(tmp_path, policy):
    """RandAugment at magnitude 10 with increasing severity keeps 4 - int(4·10/10) = 0 bits, and so does AutoAugment
    v0's ('Posterize', 0.8, 2): every draw must still give an image."""
    train = build_dataset(_folder(tmp_path), "train", input_size=(3, 16, 16), augment={"auto_augment": policy})
    random.seed(0)  # timm's augment ops draw from Python's random
    for _ in range(60):  # posterize is drawn for about 1 image in 10 (rand-n3) or 1 in 25 (v0)
        assert train[0][0].shape == (3, 16, 16)
    ops = [op for step in train.transform.transforms if isinstance(step, (RandAugment, AutoAugment))
           for op in (step.ops if isinstance(step, RandAugment) else [o for p in step.policy for o in p])]
    assert any(op.aug_fn is posterize for op in ops)
    assert not any(op.aug_fn is timm_posterize for op in ops)
