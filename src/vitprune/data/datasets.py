"""Datasets and loaders by name: ``digits``, ``cifar10``, ``cifar100`` or an image-folder path.

CIFAR and image folders go through timm's ``create_dataset`` with timm's standard train/eval
transforms, so a model sees the preprocessing it would see in a timm training script. Every
problem the user can fix becomes one :class:`VitpruneError` line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, create_dataset, create_transform, resolve_data_config
from torch.utils.data import DataLoader, Dataset

from vitprune.cache import cache_dir
from vitprune.data.digits import DIGITS_INPUT_SIZE, DigitsDataset
from vitprune.errors import VitpruneError

SPLITS = ("train", "val")

#: spec -> (timm dataset name, display name)
_CIFAR = {"cifar10": ("torch/cifar10", "CIFAR-10"), "cifar100": ("torch/cifar100", "CIFAR-100")}
NAMED_DATASETS = ("digits", *_CIFAR)

#: Image mode timm decodes to, by channel count of the model input.
_IMAGE_MODES = {1: "L", 3: "RGB"}


def build_dataset(
    spec: str,
    split: str,
    *,
    input_size: tuple[int, int, int],
    root: str | None = None,
    download: bool = False,
    is_training: bool | None = None,
    data_config: Mapping[str, Any] | None = None,
) -> Dataset:
    """The ``split`` ("train" or "val") of dataset ``spec``, transformed for a model taking ``input_size``.

    ``spec`` is ``digits``, ``cifar10``, ``cifar100`` or the path of an image folder (class
    sub-folders, optionally under ``train/`` and ``val/``). ``root`` is where CIFAR lives (default
    :func:`vitprune.cache.cache_dir` / ``data``); ``download`` fetches it if absent. ``is_training`` selects random
    augmentation and defaults to ``split == "train"``. ``data_config`` is a timm data config (for
    example ``resolve_data_config(model=model)``) whose mean, std, interpolation and crop are used
    instead of timm's ImageNet defaults; ``input_size`` always wins over its input size.
    """
    if split not in SPLITS:
        raise VitpruneError(f"unknown split {split!r} (expected one of: {', '.join(SPLITS)})")
    input_size = _check_input_size(input_size)
    if is_training is None:
        is_training = split == "train"
    if spec == "digits":
        if input_size != DIGITS_INPUT_SIZE:
            raise VitpruneError(f"digits images are {_fmt(DIGITS_INPUT_SIZE)} but the model expects {_fmt(input_size)}")
        return DigitsDataset(split, augment=is_training)
    if spec in _CIFAR:
        return _cifar(spec, split, root, download, input_size, is_training, data_config)
    return _image_folder(spec, split, input_size, is_training, data_config)


def build_loader(
    dataset: Dataset, batch_size: int, *, shuffle: bool, seed: int, num_workers: int = 0
) -> DataLoader:
    """A loader whose order (and workers' random seeds) depend only on ``seed``."""
    if batch_size < 1:
        raise VitpruneError(f"batch size must be at least 1, got {batch_size}")
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        num_workers=num_workers,
        generator=torch.Generator().manual_seed(seed),
        persistent_workers=num_workers > 0,
    )


def _fmt(size: tuple[int, int, int]) -> str:
    return "x".join(map(str, size))


def _check_input_size(input_size: tuple[int, int, int]) -> tuple[int, int, int]:
    size = tuple(int(v) for v in input_size)
    if len(size) != 3 or min(size) < 1:
        raise VitpruneError(f"input size must be (channels, height, width), got {tuple(input_size)}")
    return size


def _transform(input_size: tuple[int, int, int], is_training: bool, data_config: Mapping[str, Any] | None):
    channels = input_size[0]
    if channels not in _IMAGE_MODES:
        raise VitpruneError(f"image datasets need a model taking 1 or 3 channels, not {channels}")
    args = {**(data_config or {}), "input_size": input_size}
    if channels == 1:
        # Grayscale input: average RGB statistics to one channel rather than broadcasting the image to three.
        mean, std = args.get("mean", IMAGENET_DEFAULT_MEAN), args.get("std", IMAGENET_DEFAULT_STD)
        args.update(mean=(sum(mean) / len(mean),), std=(sum(std) / len(std),))
    cfg = resolve_data_config(args)
    return create_transform(**cfg, is_training=is_training)


def _cifar(
    spec: str,
    split: str,
    root: str | None,
    download: bool,
    input_size: tuple[int, int, int],
    is_training: bool,
    data_config: Mapping[str, Any] | None,
) -> Dataset:
    timm_name, label = _CIFAR[spec]
    root_dir = Path(root).expanduser() if root else cache_dir() / "data"
    transform = _transform(input_size, is_training, data_config)
    try:
        return create_dataset(timm_name, root=str(root_dir), split=split, download=download, transform=transform)
    except RuntimeError as e:  # torchvision: "Dataset not found or corrupted"
        if download:
            raise VitpruneError(
                f"{label} under {root_dir} is corrupt even after downloading; delete it and retry"
            ) from e
        raise VitpruneError(f"{label} not found under {root_dir}; pass --download to fetch it") from e
    except OSError as e:  # urllib's URLError and socket errors are OSErrors
        if not download:
            raise VitpruneError(f"could not read {label} under {root_dir} ({e})") from e
        reason = getattr(e, "reason", None) or e
        raise VitpruneError(
            f"could not download {label} to {root_dir} ({reason}); "
            "check the network connection or copy the dataset there"
        ) from e


def _image_folder(
    spec: str,
    split: str,
    input_size: tuple[int, int, int],
    is_training: bool,
    data_config: Mapping[str, Any] | None,
) -> Dataset:
    path = Path(spec).expanduser()
    if not path.exists():
        if "/" in spec or "\\" in spec or spec.startswith((".", "~")):
            raise VitpruneError(f"data path {spec} does not exist")
        names = ", ".join(NAMED_DATASETS)
        raise VitpruneError(f"unknown dataset {spec!r} (expected one of: {names}, or the path of an image folder)")
    if not path.is_dir():
        raise VitpruneError(f"data path {spec} is not a directory")
    transform = _transform(input_size, is_training, data_config)
    try:
        # timm uses train/ or val/ (or a synonym) under the path when present, else the path itself.
        return create_dataset(
            "", root=str(path), split=split, transform=transform, input_img_mode=_IMAGE_MODES[input_size[0]]
        )
    except RuntimeError as e:  # timm: "Found 0 images in subfolders of ..."
        raise VitpruneError(
            f"no images found under data path {spec} (expected one sub-folder of images per class)"
        ) from e
