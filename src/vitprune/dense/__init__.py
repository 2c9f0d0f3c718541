"""Pruned backbones under dense-prediction heads from maintained libraries (torchvision's), on their feature maps
(:class:`~vitprune.adapters.features.FeatureMaps`)."""

from vitprune.dense.detection import DetectionBackbone, faster_rcnn
from vitprune.dense.segmentation import Segmenter

__all__ = ["DetectionBackbone", "Segmenter", "faster_rcnn"]
