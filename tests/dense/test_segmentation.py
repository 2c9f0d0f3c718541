"""A pruned backbone under torchvision's FCN head segments the dense cluttered-MNIST task: logits at the images' size,
gradients into the backbone, and a few steps on one batch fit it."""

from __future__ import annotations

import importlib.util

import pytest
import timm
import torch
import torch.nn.functional as F

import vitprune
from vitprune.adapters import prepare_model
from vitprune.data import CLUTTERED_DENSE, ClutteredDenseDataset, collate_dense
from vitprune.dense import Segmenter
from vitprune.surgery import prune_mlp_neurons, set_input_size

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None, reason="needs vitprune[bench]")

CHANNELS, SIZE, _ = CLUTTERED_DENSE.input_size
BACKBONES = {
    "deit": ("deit_tiny_patch16_224", {"img_size": SIZE, "patch_size": 8, "embed_dim": 32, "depth": 2,
                                       "num_heads": 2}),
    "swin": ("swin_tiny_patch4_window7_224", {"img_size": SIZE, "patch_size": 4, "embed_dim": 16,
                                              "depths": (1, 1, 1, 1), "num_heads": (1, 2, 2, 4), "window_size": 4,
                                              "pretrained_cfg_overlay": {"input_size": CLUTTERED_DENSE.input_size}}),
}


def _backbone(family: str) -> torch.nn.Module:
    name, kwargs = BACKBONES[family]
    torch.manual_seed(0)
    model = prepare_model(timm.create_model(name, pretrained=False, in_chans=CHANNELS, num_classes=10, **kwargs))
    return vitprune.track(model, name, in_chans=CHANNELS, num_classes=10, **kwargs)


def assert_fits(backbone: torch.nn.Module, model: torch.nn.Module, loss, *, steps: int, lr: float,
                fraction: float = 0.5) -> None:
    """``steps`` Adam steps on ``loss()`` bring it below ``fraction`` of its start (by default, halve it), and the
    gradients reach the ``backbone`` inside ``model``."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        value = loss()
        optimizer.zero_grad()
        value.backward()
        losses.append(value.item())
        optimizer.step()
    assert vitprune.get_adapter(backbone).block(0).mlp.fc1.weight.grad.abs().sum() > 0
    assert losses[-1] < fraction * losses[0]


@pytest.fixture(scope="module")
def batch():
    return collate_dense([ClutteredDenseDataset("val")[i] for i in range(8)])


#: Swin's runs only in the full suite: the fast lane keeps one family per head.
@pytest.mark.parametrize("family", [pytest.param(f, marks=() if f == "deit" else pytest.mark.slow) for f in BACKBONES])
def test_a_pruned_backbone_segments_and_learns(family, batch):
    images, targets = batch
    masks = torch.stack([t["mask"] for t in targets])
    model = _backbone(family)
    hidden = vitprune.get_adapter(model).block(1).mlp.hidden_features
    prune_mlp_neurons(model, 1, list(range(0, hidden, 2)))
    segmenter = Segmenter(model, CLUTTERED_DENSE.num_classes)
    assert segmenter(images).shape == (8, CLUTTERED_DENSE.num_classes, SIZE, SIZE)
    assert_fits(model, segmenter, lambda: F.cross_entropy(segmenter(images), masks), steps=30, lr=1e-2)



def test_images_of_another_size_are_resized_to_the_backbone_and_logits_come_at_theirs(batch):
    """A backbone resized to 72 px (``set_input_size``) takes the 64-px canvases as torchvision's detection models
    take theirs: resized to its size; the logits equal those of the canvases resized by hand, brought back to 64 px."""
    images, _ = batch
    model = _backbone("deit").eval()
    set_input_size(model, SIZE + 8, SIZE + 8)
    segmenter = Segmenter(model, CLUTTERED_DENSE.num_classes).eval()
    with torch.no_grad():
        logits = segmenter(images)
        larger = F.interpolate(images, size=(SIZE + 8, SIZE + 8), mode="bilinear", align_corners=False)
        by_hand = F.interpolate(segmenter.head(segmenter.backbone(larger)[0]), size=(SIZE, SIZE), mode="bilinear",
                                align_corners=False)
    assert logits.shape == (8, CLUTTERED_DENSE.num_classes, SIZE, SIZE)
    torch.testing.assert_close(logits, by_hand, rtol=0, atol=0)
