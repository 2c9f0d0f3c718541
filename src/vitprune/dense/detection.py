"""Object detection on a pruned backbone: torchvision's Faster R-CNN on one of its feature maps."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch import nn
from torchvision.models.detection import FasterRCNN
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
from torchvision.ops import MultiScaleRoIAlign

from vitprune.adapters import get_adapter
from vitprune.adapters.features import FeatureMaps


class DetectionBackbone(nn.Module):
    """``model``'s feature map after block (a staged family: stage) ``index`` as torchvision's detection models take a
    backbone: a dict of maps, and :attr:`out_channels`."""

    def __init__(self, model: nn.Module, index: int = -1) -> None:
        super().__init__()
        self.maps = FeatureMaps(model, [index])
        self.out_channels = self.maps.channels[0]

    def forward(self, images: torch.Tensor) -> OrderedDict[str, torch.Tensor]:
        return OrderedDict(zip("0", self.maps(images)))


def faster_rcnn(model: nn.Module, num_classes: int, *, index: int = -1,
                anchor_sizes: Sequence[int] = (16, 24, 32), representation: int = 1024, **options) -> FasterRCNN:
    """torchvision's Faster R-CNN on ``model``'s feature map after block ``index`` (:class:`DetectionBackbone`), for
    ``num_classes`` classes with the background (torchvision's convention: label 0 is none).

    The images are resized to ``model``'s input size (exactly: torchvision's transform with a fixed size and no
    padding to a multiple, which a ViT's fixed patch grid would refuse) and taken as already normalised; boxes come
    back at the images' own size. Anchors of ``anchor_sizes`` pixels at three aspect ratios; the box head is
    torchvision's two-layer MLP of ``representation`` features (torchvision's 1024 by default) on 7x7 RoIAlign.
    ``options`` go to ``FasterRCNN`` (e.g. ``box_detections_per_img``).
    """
    channels, height, width = get_adapter(model).input_size
    anchors = AnchorGenerator(sizes=(tuple(anchor_sizes),), aspect_ratios=((0.5, 1.0, 2.0),))
    pool = MultiScaleRoIAlign(featmap_names=["0"], output_size=7, sampling_ratio=2)
    backbone = DetectionBackbone(model, index)
    box_head = TwoMLPHead(backbone.out_channels * 7 * 7, representation)
    return FasterRCNN(backbone, rpn_anchor_generator=anchors, box_roi_pool=pool, box_head=box_head,
                      box_predictor=FastRCNNPredictor(representation, num_classes), min_size=min(height, width),
                      max_size=max(height, width), image_mean=[0.0] * channels, image_std=[1.0] * channels,
                      fixed_size=(width, height), size_divisible=1, **options)
