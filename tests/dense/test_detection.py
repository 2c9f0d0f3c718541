"""A pruned backbone under torchvision's Faster R-CNN detects the dense cluttered-MNIST digits: its losses fall over a
few steps on one batch, gradients reach the backbone, and inference gives boxes inside the image; a token-pruned
backbone runs under both heads."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from test_segmentation import BACKBONES, SIZE, _backbone, assert_fits

from vitprune.data import CLUTTERED_DENSE, ClutteredDenseDataset, collate_dense
from vitprune.dense import Segmenter, faster_rcnn, rcnn_transform
from vitprune.surgery import prune_depth, prune_tokens, set_input_size

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None, reason="needs vitprune[bench]")

#: Fewer proposals and sampled regions than torchvision's defaults (2000 and 512), which only cost time here.
SMALL = {"rpn_post_nms_top_n_train": 100, "box_batch_size_per_image": 32}


@pytest.fixture(scope="module")
def batch():
    images, targets = collate_dense([ClutteredDenseDataset("val")[i] for i in range(8)])
    return list(images), [{"boxes": t["boxes"], "labels": t["labels"]} for t in targets]


#: Swin's runs only in the full suite: the fast lane keeps one family per head.
@pytest.mark.parametrize("family", [pytest.param(f, marks=() if f == "deit" else pytest.mark.slow) for f in BACKBONES])
def test_a_depth_pruned_backbone_detects_and_learns(family, batch):
    images, targets = batch
    model = _backbone(family)
    prune_depth(model, attention=[1])
    detector = faster_rcnn(model, CLUTTERED_DENSE.num_classes, **SMALL).train()
    assert_fits(model, detector, lambda: sum(detector(images, targets).values()), steps=12, lr=1e-3)
    detector.eval()
    with torch.no_grad():
        found = detector(images)
    assert len(found) == len(images)
    for result in found:
        boxes, labels = result["boxes"], result["labels"]
        assert boxes.shape[1] == 4 and bool(((boxes >= 0) & (boxes <= SIZE)).all())
        assert bool(((labels >= 1) & (labels < CLUTTERED_DENSE.num_classes)).all())
        assert torch.equal(result["scores"], result["scores"].sort(descending=True).values)


def test_a_token_pruned_backbone_runs_under_both_heads(batch):
    """STAR's maps cover the whole grid, so the segmenter's logits have the images' size and the detector runs."""
    images, _ = batch
    model = _backbone("deit")
    prune_tokens(model, 1, 0.5)
    segmenter = Segmenter(model, CLUTTERED_DENSE.num_classes).eval()
    detector = faster_rcnn(model, CLUTTERED_DENSE.num_classes).eval()
    with torch.no_grad():
        assert segmenter(torch.stack(images)).shape == (8, CLUTTERED_DENSE.num_classes, SIZE, SIZE)
        assert len(detector(images)) == len(images)


def test_a_resized_backbone_gets_its_own_size_and_boxes_come_back_at_the_images():
    """A backbone resized to 72 px (not a multiple of torchvision's default padding, 32) sees 72-px images and no
    padding; the boxes are mapped back to the 64-px canvases."""
    model = _backbone("deit")
    set_input_size(model, SIZE + 8, SIZE + 8)
    detector = faster_rcnn(model, CLUTTERED_DENSE.num_classes, representation=64, box_score_thresh=0.0).eval()
    assert detector.roi_heads.box_predictor.cls_score.in_features == 64
    seen = []
    detector.backbone.register_forward_pre_hook(lambda module, args: seen.append(tuple(args[0].shape[-2:])))
    images = [torch.randn(1, SIZE, SIZE, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    with torch.no_grad():
        found = detector(images)
    assert seen == [(SIZE + 8, SIZE + 8)]
    boxes = torch.cat([f["boxes"] for f in found])
    assert len(boxes) > 0 and bool(((boxes >= 0) & (boxes <= SIZE)).all())
    # The transform alone resizes images and boxes as the detector's own does.
    targets = [{"boxes": torch.tensor([[1.0, 2.0, 30.0, 40.0]]), "labels": torch.tensor([3])} for _ in images]
    alone, inside = rcnn_transform(model)(images, targets), detector.transform(images, targets)
    assert torch.equal(alone[0].tensors, inside[0].tensors) and alone[0].image_sizes == [(SIZE + 8, SIZE + 8)] * 2
    assert all(torch.equal(a["boxes"], b["boxes"]) for a, b in zip(alone[1], inside[1]))
