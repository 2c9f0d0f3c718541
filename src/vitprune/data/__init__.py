"""Datasets and loaders: the built-in digits and cluttered-MNIST tasks, CIFAR and image folders via timm."""

from __future__ import annotations

from vitprune.data.cluttered_mnist import (
    CLUTTERED_MNIST_INPUT_SIZE,
    CLUTTERED_MNIST_NUM_CLASSES,
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
    DIGITS_INPUT_SIZE,
    DIGITS_MEAN,
    DIGITS_NUM_CLASSES,
    DIGITS_STD,
    DigitsDataset,
    load_digits_split,
)
from vitprune.data.subset import balanced_subset

__all__ = [
    "AUGMENTATIONS",
    "CLUTTERED_MNIST_INPUT_SIZE",
    "CLUTTERED_MNIST_NUM_CLASSES",
    "DIGITS_INPUT_SIZE",
    "DIGITS_MEAN",
    "DIGITS_NUM_CLASSES",
    "DIGITS_STD",
    "NAMED_DATASETS",
    "SPLITS",
    "ClutteredMnistDataset",
    "DigitsDataset",
    "augmented",
    "balanced_subset",
    "build_dataset",
    "build_loader",
    "check_augmentation",
    "dataset_classes",
    "image_folder_classes",
    "load_digits_split",
    "load_mnist_digits",
]
