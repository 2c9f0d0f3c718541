"""A pruned backbone under transformers' Deformable DETR, the detector family of HetDPT's detection rows
(H-Deformable DETR is Deformable DETR with hybrid matching)."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from vitprune.dense.smp_encoder import PrunedEncoder

#: Deformable DETR reads its backbone's maps at strides 8, 16 and 32 (and adds a fourth level at 64 itself).
FIRST_LEVEL = 3


class _Levels(nn.Module):
    """The encoder's maps at strides 8, 16 and 32, as the list Deformable DETR's backbone wrapper takes."""

    def __init__(self, encoder: PrunedEncoder) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        return self.encoder(images)[FIRST_LEVEL:]


def deformable_detr(source: nn.Module | str | os.PathLike, num_classes: int, *, pyramid_channels: int = 256,
                    **config: Any) -> nn.Module:
    """transformers' ``DeformableDetrForObjectDetection`` on ``source`` (a pruned model or the directory it was saved
    to): its maps at strides 8, 16 and 32 (:class:`~vitprune.dense.smp_encoder.PrunedEncoder`'s: a staged family's
    own stages, a plain ViT's ViTDet pyramid of ``pyramid_channels``), projected and extended by a stride-2 level
    as Deformable DETR does. ``num_classes`` counts the objects' classes (DETR adds no background class);
    ``config`` holds other ``DeformableDetrConfig`` options (``d_model``, layers, queries, ``with_box_refine``).
    It trains as transformers' detector does: ``pixel_values`` of the backbone's size, ``labels`` with
    ``class_labels`` and normalised ``(cx, cy, w, h)`` ``boxes``."""
    config_class, detector_class, stand_in_class = _transformers()
    encoder = PrunedEncoder(source, pyramid_channels=pyramid_channels)
    channels = encoder.out_channels[FIRST_LEVEL:]
    # transformers builds the input projections from its backbone's channels: a ResNet stand-in with the pruned
    # backbone's channels (strides 8, 16, 32 from its last three stages) has them built by transformers' own code;
    # the pruned backbone then replaces it, after the detector's weight initialisation, which it would otherwise
    # overwrite.
    stand_in = stand_in_class(num_channels=encoder.out_channels[0], embedding_size=8, depths=[1] * 4,
                                         hidden_sizes=[8, *channels], out_features=["stage2", "stage3", "stage4"])
    detector = detector_class(config_class(
        backbone_config=stand_in, num_labels=num_classes, num_channels=encoder.out_channels[0], **config))
    detector.model.backbone.model = _Levels(encoder)
    return detector


def _transformers() -> tuple[Any, Any, Any]:
    """Deformable DETR's config and detector classes, and the ResNet config of the stand-in backbone."""
    try:
        from transformers.models.deformable_detr import DeformableDetrConfig, DeformableDetrForObjectDetection
        from transformers.models.resnet import ResNetConfig
    except ImportError as error:
        raise ImportError("Deformable DETR needs transformers: pip install 'vitprune[hf]'") from error
    return DeformableDetrConfig, DeformableDetrForObjectDetection, ResNetConfig
