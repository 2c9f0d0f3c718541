"""Object detection on a pruned backbone: torchvision's Faster R-CNN (and Mask R-CNN) on one of its feature maps,
or on ViTDet's simple feature pyramid built from it."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch import nn
from torchvision.models.detection import FasterRCNN, MaskRCNN
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
from torchvision.models.detection.mask_rcnn import MaskRCNNPredictor
from torchvision.models.detection.transform import GeneralizedRCNNTransform
from torchvision.ops import MultiScaleRoIAlign

from vitprune.adapters import get_adapter
from vitprune.adapters.features import FeatureMaps
from vitprune.dense.pyramid import SCALES, SimpleFeaturePyramid


class DetectionBackbone(nn.Module):
    """``model``'s feature map after block (a staged family: stage) ``index`` as torchvision's detection models take a
    backbone: a dict of maps, and :attr:`out_channels`."""

    def __init__(self, model: nn.Module, index: int = -1) -> None:
        super().__init__()
        self.maps = FeatureMaps(model, [index])
        self.out_channels = self.maps.channels[0]

    def forward(self, images: torch.Tensor) -> OrderedDict[str, torch.Tensor]:
        return OrderedDict(zip("0", self.maps(images)))


def faster_rcnn(model: nn.Module, num_classes: int, *, index: int = -1, pyramid: bool = False,
                anchor_sizes: Sequence[int] | None = None, representation: int = 1024, pyramid_channels: int = 256,
                scales: Sequence[float] = SCALES, **options) -> FasterRCNN:
    """torchvision's Faster R-CNN on ``model``: on its feature map after block ``index`` (:class:`DetectionBackbone`),
    or (``pyramid``) on ViTDet's simple feature pyramid built from it
    (:class:`~vitprune.dense.pyramid.SimpleFeaturePyramid`, ``pyramid_channels`` wide, at ``scales`` of the map:
    ViTDet's by default), for ``num_classes`` classes
    with the background (torchvision's convention: label 0 is none).

    The images are resized to ``model``'s input size (exactly: torchvision's transform with a fixed size and no
    padding to a multiple, which a ViT's fixed patch grid would refuse) and taken as already normalised; boxes come
    back at the images' own size. Anchors at three aspect ratios: on one map, of every size in ``anchor_sizes``
    (default 16, 24 and 32 pixels); on the pyramid, one size per level (default 8 cells of the level's stride, as
    torchvision's FPN detectors). The box head is torchvision's two-layer MLP of ``representation`` features
    (torchvision's 1024 by default) on 7x7 RoIAlign. ``options`` go to ``FasterRCNN`` (e.g.
    ``box_detections_per_img``).
    """
    return FasterRCNN(**_parts(model, num_classes, index, pyramid, anchor_sizes, representation, pyramid_channels,
                               scales), **options)


def mask_rcnn(model: nn.Module, num_classes: int, *, index: int = -1, pyramid: bool = True,
              anchor_sizes: Sequence[int] | None = None, representation: int = 1024, pyramid_channels: int = 256,
              scales: Sequence[float] = SCALES, **options) -> MaskRCNN:
    """torchvision's Mask R-CNN on ``model``, built as :func:`faster_rcnn` builds its detector (by default on the
    simple feature pyramid, as ViTDet's Mask R-CNN), its mask head torchvision's (four 3x3 convolutions and a
    predictor, 256 wide) on 14x14 RoIAlign of the same maps. ``options`` go to ``MaskRCNN``."""
    parts = _parts(model, num_classes, index, pyramid, anchor_sizes, representation, pyramid_channels, scales)
    mask_pool = MultiScaleRoIAlign(featmap_names=parts["box_roi_pool"].featmap_names, output_size=14,
                                   sampling_ratio=2)
    return MaskRCNN(**parts, mask_roi_pool=mask_pool, mask_predictor=MaskRCNNPredictor(256, 256, num_classes),
                    **options)


def _parts(model: nn.Module, num_classes: int, index: int, pyramid: bool, anchor_sizes: Sequence[int] | None,
           representation: int, pyramid_channels: int, scales: Sequence[float]) -> dict:
    """The backbone, anchors, pooling, box head and transform settings a torchvision R-CNN takes."""
    if pyramid:
        backbone = SimpleFeaturePyramid(model, pyramid_channels, index=index, scales=scales)
        levels = [str(i) for i in range(len(backbone.levels))]
        sizes = list(anchor_sizes or [round(8 * stride) for stride in backbone.strides])
        if len(sizes) != len(backbone.strides):
            raise ValueError(f"the pyramid has {len(backbone.strides)} levels: give one anchor size per level, "
                             f"not {len(sizes)}")
        anchors = AnchorGenerator(sizes=tuple((size,) for size in sizes), aspect_ratios=((0.5, 1.0, 2.0),) * len(sizes))
    else:
        backbone, levels = DetectionBackbone(model, index), ["0"]
        anchors = AnchorGenerator(sizes=(tuple(anchor_sizes or (16, 24, 32)),), aspect_ratios=((0.5, 1.0, 2.0),))
    return {"backbone": backbone, "num_classes": None, "rpn_anchor_generator": anchors,
            "box_roi_pool": MultiScaleRoIAlign(featmap_names=levels, output_size=7, sampling_ratio=2),
            "box_head": TwoMLPHead(backbone.out_channels * 7 * 7, representation),
            "box_predictor": FastRCNNPredictor(representation, num_classes), **_transform_settings(model)}


def rcnn_transform(model: nn.Module) -> GeneralizedRCNNTransform:
    """The transform of :func:`faster_rcnn`'s and :func:`mask_rcnn`'s detectors on ``model``, alone: images resized
    to its input size and boxes with them (e.g. to resize a training set once)."""
    return GeneralizedRCNNTransform(**_transform_settings(model))


def _transform_settings(model: nn.Module) -> dict:
    """The transform's settings: a fixed size, ``model``'s input size, and no padding to a multiple, which a ViT's
    fixed patch grid would refuse; the images taken as already normalised."""
    channels, height, width = get_adapter(model).input_size
    return {"min_size": min(height, width), "max_size": max(height, width), "image_mean": [0.0] * channels,
            "image_std": [1.0] * channels, "fixed_size": (width, height), "size_divisible": 1}
