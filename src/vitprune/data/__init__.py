"""Datasets and loaders: the built-in digits task, CIFAR and image folders via timm."""

from __future__ import annotations

from vitprune.data.datasets import NAMED_DATASETS, SPLITS, build_dataset, build_loader
from vitprune.data.digits import (
    DIGITS_INPUT_SIZE,
    DIGITS_MEAN,
    DIGITS_NUM_CLASSES,
    DIGITS_STD,
    DigitsDataset,
    load_digits_split,
)
from vitprune.data.subset import balanced_subset

__all__ = [
    "DIGITS_INPUT_SIZE",
    "DIGITS_MEAN",
    "DIGITS_NUM_CLASSES",
    "DIGITS_STD",
    "NAMED_DATASETS",
    "SPLITS",
    "DigitsDataset",
    "balanced_subset",
    "build_dataset",
    "build_loader",
    "load_digits_split",
]
