"""ViTDet's simple feature pyramid on a plain ViT: four scales and the RPN's pool from one map, under torchvision's
Faster R-CNN (losses fall on one batch, gradients reach the pruned backbone) and Mask R-CNN."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from test_detection import SMALL, batch  # noqa: F401 (a fixture)
from test_segmentation import SIZE, _backbone, assert_fits

import vitprune
from vitprune.data import CLUTTERED_DENSE, ClutteredDenseDataset, collate_dense
from vitprune.dense import SimpleFeaturePyramid, faster_rcnn, mask_rcnn
from vitprune.surgery import prune_depth, prune_embed_dims

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None, reason="needs vitprune[bench]")


def test_the_pyramid_resamples_the_last_map_to_four_scales_and_a_pool():
    model = _backbone("deit")  # 64 px in 8-px patches: an 8x8 map, 32 channels
    pyramid = SimpleFeaturePyramid(model, 16)
    maps = pyramid(torch.randn(2, 1, SIZE, SIZE))
    assert list(maps) == ["0", "1", "2", "3", "pool"]
    assert [tuple(m.shape) for m in maps.values()] == [(2, 16, 32, 32), (2, 16, 16, 16), (2, 16, 8, 8), (2, 16, 4, 4),
                                                       (2, 16, 2, 2)]
    assert pyramid.strides == [2, 4, 8, 16, 32] and pyramid.out_channels == 16
    wider = SimpleFeaturePyramid(model, 16, scales=(8.0, 0.25), top_pool=False)  # further powers of two
    assert [tuple(m.shape) for m in wider(torch.randn(1, 1, SIZE, SIZE)).values()] == [(1, 16, 64, 64), (1, 16, 2, 2)]
    assert wider.strides == [1, 32]
    with pytest.raises(ValueError, match="scales are powers of two"):
        SimpleFeaturePyramid(model, 16, scales=(3.0,))
    # The pyramid of a map computed elsewhere (cached, or by the last blocks from cached tokens) is forward's.
    images = torch.randn(2, 1, SIZE, SIZE)
    with torch.no_grad():
        (last,) = pyramid.maps(images)
        assert all(torch.equal(a, b) for a, b in zip(pyramid.from_map(last).values(), pyramid(images).values()))


def test_a_width_pruned_maps_odd_channels_still_up_sample():
    model = _backbone("deit")
    prune_embed_dims(model, list(range(27)))  # 27 of 32 channels, as width pruning may leave them
    pyramid = SimpleFeaturePyramid(model, 8, scales=(4.0, 1.0))
    assert [tuple(m.shape) for m in pyramid(torch.randn(1, 1, SIZE, SIZE)).values()] == [(1, 8, 32, 32),
                                                                                        (1, 8, 8, 8), (1, 8, 4, 4)]


def test_faster_rcnn_on_the_pyramid_of_a_depth_pruned_backbone_learns(batch):  # noqa: F811
    images, targets = batch
    model = _backbone("deit")
    prune_depth(model, attention=[1])
    detector = faster_rcnn(model, CLUTTERED_DENSE.num_classes, pyramid=True, pyramid_channels=32,
                           representation=128, **SMALL).train()
    assert detector.rpn.anchor_generator.sizes == ((16,), (32,), (64,), (128,), (256,))  # 8 cells of each stride
    assert_fits(model, detector, lambda: sum(detector(images, targets).values()), steps=12, lr=1e-3)
    with pytest.raises(ValueError, match="one anchor size per level"):
        faster_rcnn(model, CLUTTERED_DENSE.num_classes, pyramid=True, anchor_sizes=(16, 32))


def test_mask_rcnn_on_the_pyramid_trains_a_batch():
    """Instance masks from the dense task (each digit's pixels of its class inside its box): every loss is finite
    and the gradients reach the backbone."""
    images, targets = collate_dense([ClutteredDenseDataset("val")[i] for i in range(4)])
    for t in targets:
        inside = torch.zeros(len(t["boxes"]), SIZE, SIZE, dtype=torch.bool)
        for k, (x0, y0, x1, y1) in enumerate(t["boxes"].round().int().tolist()):
            inside[k, y0:y1, x0:x1] = True
        t["masks"] = (inside & (t["mask"] == t["labels"][:, None, None])).to(torch.uint8)
    model = _backbone("deit")
    detector = mask_rcnn(model, CLUTTERED_DENSE.num_classes, pyramid_channels=32, representation=128, **SMALL)
    losses = detector.train()(list(images), [{k: t[k] for k in ("boxes", "labels", "masks")} for t in targets])
    assert "loss_mask" in losses and all(torch.isfinite(v) for v in losses.values())
    sum(losses.values()).backward()
    assert vitprune.get_adapter(model).block(0).mlp.fc1.weight.grad.abs().sum() > 0
