"""A pruned, saved and reloaded backbone under transformers' Deformable DETR: its weights survive the detector's
initialisation, a few steps on one batch of the dense task lower the Hungarian loss, gradients reach the backbone."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from test_segmentation import SIZE, _backbone, assert_fits
from torchvision.ops import box_convert

import vitprune
from vitprune.data import CLUTTERED_DENSE, ClutteredDenseDataset, collate_dense
from vitprune.dense import deformable_detr
from vitprune.surgery import prune_depth

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None, reason="needs vitprune[bench]")
pytest.importorskip("transformers", reason="needs vitprune[hf]")

#: A detector small enough for one batch on a CPU: one encoder and two decoder layers (transformers ties the
#: decoder layers' box heads to the first, which fails with one), 20 queries.
TINY = {"d_model": 32, "encoder_layers": 1, "decoder_layers": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
        "encoder_attention_heads": 2, "decoder_attention_heads": 2, "num_queries": 20, "encoder_n_points": 2,
        "decoder_n_points": 2}


@pytest.mark.parametrize("family", ["deit", "swin"])
def test_deformable_detr_trains_a_batch_on_a_pruned_reloaded_backbone(family, tmp_path):
    model = _backbone(family)
    prune_depth(model, attention=[1])
    vitprune.save(model, tmp_path / "pruned")
    reloaded = vitprune.load(tmp_path / "pruned")
    torch.manual_seed(0)
    detector = deformable_detr(tmp_path / "pruned", CLUTTERED_DENSE.num_classes - 1, pyramid_channels=32, **TINY)
    inside = detector.model.backbone.model.encoder
    backbone = inside.backbone.maps.model if family == "deit" else inside.backbone.model
    assert all(torch.equal(a, b) for a, b in zip(backbone.state_dict().values(), reloaded.state_dict().values(),
                                                 strict=True))
    images, targets = collate_dense([ClutteredDenseDataset("val")[i] for i in range(4)])
    labels = [{"class_labels": t["labels"] - 1,  # DETR's classes start at 0: it has no background class
               "boxes": box_convert(t["boxes"], "xyxy", "cxcywh") / SIZE} for t in targets]
    detector.train()
    assert_fits(backbone, detector, lambda: detector(pixel_values=images, labels=labels).loss, steps=8, lr=1e-3,
                fraction=0.8)
    boxes = detector.eval()(pixel_values=images).pred_boxes
    assert boxes.shape == (4, TINY["num_queries"], 4)
