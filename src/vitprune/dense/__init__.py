"""Pruned backbones under dense-prediction heads from maintained libraries (torchvision's detectors and FCN,
segmentation_models_pytorch's decoders, transformers' Deformable DETR), on their feature maps
(:class:`~vitprune.adapters.features.FeatureMaps`)."""

from vitprune.dense.detection import DetectionBackbone, faster_rcnn, mask_rcnn, rcnn_transform
from vitprune.dense.detr import deformable_detr
from vitprune.dense.metrics import DetectionMatches, detection_matches, detection_scores, segmentation_scores
from vitprune.dense.pyramid import SimpleFeaturePyramid
from vitprune.dense.segmentation import Segmenter
from vitprune.dense.smp_encoder import PrunedEncoder, register_encoder

__all__ = ["DetectionBackbone", "DetectionMatches", "PrunedEncoder", "Segmenter", "SimpleFeaturePyramid",
           "deformable_detr", "detection_matches", "detection_scores", "faster_rcnn", "mask_rcnn", "rcnn_transform",
           "register_encoder", "segmentation_scores"]
