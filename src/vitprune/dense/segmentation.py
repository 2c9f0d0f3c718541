"""Semantic segmentation on a pruned backbone: torchvision's FCN head on one of its feature maps."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.segmentation.fcn import FCNHead

from vitprune.adapters.features import FeatureMaps


class Segmenter(nn.Module):
    """``model``'s feature map after block (a staged family: stage) ``index`` under torchvision's ``FCNHead`` (a 3x3
    convolution, batch norm, ReLU, dropout and a 1x1 classifier); ``forward`` gives per-pixel class logits
    ``(B, num_classes, H, W)`` at the images' size (bilinear upsampling, as torchvision's FCN does)."""

    def __init__(self, model: nn.Module, num_classes: int, index: int = -1) -> None:
        super().__init__()
        self.backbone = FeatureMaps(model, [index])
        self.head = FCNHead(self.backbone.channels[0], num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        (features,) = self.backbone(images)
        return F.interpolate(self.head(features), size=images.shape[-2:], mode="bilinear", align_corners=False)
