"""Pruned backbones under dense-prediction heads from maintained libraries (torchvision's), on their feature maps
(:class:`~vitprune.adapters.features.FeatureMaps`)."""

from vitprune.dense.segmentation import Segmenter

__all__ = ["Segmenter"]
