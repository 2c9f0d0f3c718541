"""Datasets and loaders: the built-in digits and cluttered-MNIST tasks (classification, and dense: masks and boxes),
CIFAR and image folders via timm."""

from __future__ import annotations

from vitprune.data.cluttered_dense import CLUTTERED_DENSE, ClutteredDenseDataset, collate_dense
from vitprune.data.cluttered_mnist import (
    CLUTTERED_MNIST,
    ClutteredMnistDataset,
    load_mnist_digits,
)
from vitprune.data.datasets import (
    AUGMENTATIONS,
    NAMED_DATASETS,
    SPLITS,
    augmented,
    build_dataset,
    build_loader,
    check_augmentation,
    dataset_classes,
    image_folder_classes,
)
from vitprune.data.digits import (
    DIGITS,
    DigitsDataset,
    load_digits_split,
)
from vitprune.data.own import OwnTask
from vitprune.data.subset import balanced_subset

__all__ = [
    "AUGMENTATIONS",
    "CLUTTERED_DENSE",
    "CLUTTERED_MNIST",
    "DIGITS",
    "NAMED_DATASETS",
    "SPLITS",
    "ClutteredDenseDataset",
    "ClutteredMnistDataset",
    "DigitsDataset",
    "OwnTask",
    "augmented",
    "balanced_subset",
    "build_dataset",
    "build_loader",
    "check_augmentation",
    "collate_dense",
    "dataset_classes",
    "image_folder_classes",
    "load_digits_split",
    "load_mnist_digits",
]
