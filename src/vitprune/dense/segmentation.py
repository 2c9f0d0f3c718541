"""Semantic segmentation on a pruned backbone: torchvision's FCN head on one of its feature maps."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.segmentation.fcn import FCNHead

from vitprune.adapters import get_adapter
from vitprune.adapters.features import FeatureMaps


class Segmenter(nn.Module):
    """``model``'s feature map after block (a staged family: stage) ``index`` under torchvision's ``FCNHead`` (a 3x3
    convolution, batch norm, ReLU, dropout and a 1x1 classifier); ``forward`` gives per-pixel class logits
    ``(B, num_classes, H, W)`` at the images' size (bilinear upsampling, as torchvision's FCN does).

    Images of another size than the backbone takes are resized to it first (bilinear), as torchvision's detection
    models resize theirs; the logits still come at the images' own size."""

    def __init__(self, model: nn.Module, num_classes: int, index: int = -1) -> None:
        super().__init__()
        self.backbone = FeatureMaps(model, [index])
        self.head = FCNHead(self.backbone.channels[0], num_classes)
        self.input_size = tuple(get_adapter(model).input_size[1:])

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        size = tuple(images.shape[-2:])
        taken = images if size == self.input_size else F.interpolate(images, size=self.input_size, mode="bilinear",
                                                                       align_corners=False)
        (features,) = self.backbone(taken)
        return F.interpolate(self.head(features), size=size, mode="bilinear", align_corners=False)
