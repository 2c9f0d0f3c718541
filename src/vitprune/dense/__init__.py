"""Pruned backbones under dense-prediction heads from maintained libraries (torchvision's), on their feature maps
(:class:`~vitprune.adapters.features.FeatureMaps`)."""

from vitprune.dense.detection import DetectionBackbone, faster_rcnn, mask_rcnn
from vitprune.dense.metrics import detection_scores, segmentation_scores
from vitprune.dense.pyramid import SimpleFeaturePyramid
from vitprune.dense.segmentation import Segmenter

__all__ = ["DetectionBackbone", "Segmenter", "SimpleFeaturePyramid", "detection_scores", "faster_rcnn", "mask_rcnn",
           "segmentation_scores"]
