"""Datasets and loaders by name: ``digits``, ``cluttered-mnist``, ``cifar10``, ``cifar100`` or an image-folder path.

CIFAR and image folders go through timm's ``create_dataset`` with timm's standard train/eval
transforms, so a model sees the preprocessing it would see in a timm training script; a training
transform can add RandAugment and random erasing (``augment``), and :func:`augmented` gives a
dataset built here the augmentation a training run asks for. Every split of an image folder is
labelled by one class list (:func:`image_folder_classes`, or the classes a model predicts), and
:func:`dataset_classes` names a built dataset's classes. Every problem the user can fix becomes
one :class:`VitpruneError` line, and a class with no images in a split one :class:`VitpruneWarning`.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from PIL import Image, ImageOps
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, create_dataset, create_transform, resolve_data_config
from timm.data.auto_augment import posterize as timm_posterize
from timm.utils import natural_key
from torch.utils.data import DataLoader, Dataset, Subset

from vitprune.cache import cache_dir
from vitprune.data.cluttered_mnist import CLUTTERED_MNIST, ClutteredMnistDataset
from vitprune.data.digits import DIGITS, DigitsDataset
from vitprune.errors import VitpruneError, VitpruneWarning

SPLITS = ("train", "val")

#: spec -> (timm dataset name, display name)
_CIFAR = {"cifar10": ("torch/cifar10", "CIFAR-10"), "cifar100": ("torch/cifar100", "CIFAR-100")}
#: vitprune's own datasets, which draw (and augment) their own images: spec -> (task, dataset class)
_OWN = {"digits": (DIGITS, DigitsDataset), "cluttered-mnist": (CLUTTERED_MNIST, ClutteredMnistDataset)}
NAMED_DATASETS = (*_OWN, *_CIFAR)

#: Image mode timm decodes to, by channel count of the model input.
_IMAGE_MODES = {1: "L", 3: "RGB"}

#: The random augmentation a training transform can add, and its "off" values: a timm RandAugment/AutoAugment
#: policy (e.g. ``rand-m9-mstd0.5-inc1``) and the random-erasing probability (:class:`TrainConfig`'s fields).
AUGMENTATIONS: dict[str, Any] = {"auto_augment": None, "re_prob": 0.0}

#: Where a dataset built here keeps how its transform was made, so :func:`augmented` can rebuild it.
_SPEC_ATTR = "_vitprune_transform_spec"
#: Where a dataset built here keeps its class names, in label order (:func:`dataset_classes`).
_CLASSES_ATTR = "_vitprune_classes"
#: The sub-folders of an image folder that hold its splits: timm's names for them, the usual one first.
_SPLIT_FOLDERS = {"train": ("train", "training"), "val": ("val", "valid", "validation", "eval", "evaluation")}


@dataclass(frozen=True)
class _TransformSpec:
    """How :func:`build_dataset` made a dataset's transform (``input_size`` ``None``: the own one of the dataset
    named ``own``)."""

    input_size: tuple[int, int, int] | None
    is_training: bool
    data_config: Mapping[str, Any] | None
    augment: tuple[tuple[str, Any], ...]
    own: str | None = None


def build_dataset(
    spec: str,
    split: str,
    *,
    input_size: tuple[int, int, int],
    root: str | None = None,
    download: bool = False,
    is_training: bool | None = None,
    data_config: Mapping[str, Any] | None = None,
    augment: Mapping[str, Any] | None = None,
    classes: Sequence[str] | None = None,
    val_split: float | None = None,
    split_seed: int = 0,
) -> Dataset:
    """The ``split`` ("train" or "val") of dataset ``spec``, transformed for a model taking ``input_size``.

    ``spec`` is ``digits``, ``cluttered-mnist`` (needs ``vitprune[bench]``), ``cifar10``, ``cifar100``
    or the path of an image folder: ``train/<class>/`` and ``val/<class>/`` sub-folders of images. A flat
    folder (``<class>/`` sub-folders alone) is refused unless ``val_split`` holds out that fraction of each
    class's images for validation, drawn with ``split_seed``; the others train. Every split of a folder is labelled
    by one class list: ``classes`` (those a model predicts, in order; a class folder outside them is refused)
    or else :func:`image_folder_classes`, and a class with no images in the split is a
    :class:`~vitprune.errors.VitpruneWarning` naming it. The named datasets have their own classes, which
    ``classes`` must equal. :func:`dataset_classes` names the result's classes.
    ``root`` is where CIFAR lives (default :func:`vitprune.cache.cache_dir` / ``data``); ``download``
    fetches it if absent. ``is_training`` selects random augmentation and defaults to ``split == "train"``.
    ``data_config`` is a timm data config (for example ``resolve_data_config(model=model)``) whose mean,
    std, interpolation and crop are used instead of timm's ImageNet defaults; ``input_size`` always wins
    over its input size. ``augment`` adds random augmentation to a training transform (keys of
    :data:`AUGMENTATIONS`, e.g. :attr:`TrainConfig.augment <vitprune.training.TrainConfig.augment>`).
    """
    if split not in SPLITS:
        raise VitpruneError(f"unknown split {split!r} (expected one of: {', '.join(SPLITS)})")
    input_size = _check_input_size(input_size)
    if is_training is None:
        is_training = split == "train"
    wanted = _augmentation(augment)
    if val_split is not None and spec in NAMED_DATASETS:
        raise VitpruneError(f"--val-split splits a flat image folder; {spec} has its own train and val splits")
    if spec in _OWN:
        task, dataset_class = _OWN[spec]
        if input_size != task.input_size:
            raise VitpruneError(f"{spec} images are {_fmt(task.input_size)} but the model expects {_fmt(input_size)}")
        _check_own(spec, wanted)
        own = dataset_class(split, augment=is_training)
        _labelled(own, _named(spec, [str(c) for c in range(task.num_classes)], classes))
        return _record(own, _TransformSpec(None, is_training, None, (), spec))
    if wanted and not is_training:
        raise VitpruneError(f"random augmentation ({_describe(wanted)}) applies to training transforms only")
    transform_spec = _TransformSpec(input_size, is_training, data_config, wanted)
    if spec in _CIFAR:
        cifar = _cifar(spec, split, root, download, transform_spec)
        return _record(_labelled(cifar, _named(spec, list(cifar.classes), classes)), transform_spec)
    return _image_folder(spec, split, transform_spec, classes, val_split, split_seed)


def image_folder_classes(spec: str | os.PathLike, *, val_split: float | None = None) -> list[str]:
    """The classes of image folder ``spec``, one list for all its splits: the union of the class sub-folders of its
    ``train/`` and ``val/`` folders (with ``val_split``, of the flat folder itself), sorted as timm sorts them
    (natural order). A sub-folder whose name starts with a dot is not a class."""
    spec = str(spec)
    folders = _split_folders(_folder_path(spec), spec, val_split)
    return sorted({entry.name for folder in folders.values() for entry in folder.iterdir()
                   if entry.is_dir() and not entry.name.startswith(".")}, key=natural_key)


def dataset_classes(dataset: Dataset) -> list[str] | None:
    """The class names of a dataset from :func:`build_dataset` (or a ``Subset`` of one) in label order; ``None`` for
    a dataset built elsewhere."""
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    classes = getattr(dataset, _CLASSES_ATTR, None)
    return None if classes is None else list(classes)


def augmented(dataset: Dataset, augment: Mapping[str, Any]) -> Dataset:
    """``dataset`` with the random augmentation ``augment`` asks for (keys of :data:`AUGMENTATIONS`).

    A dataset from :func:`build_dataset` (or a ``Subset`` of one) that already has it comes back
    as it is; otherwise a shallow copy comes back with its training transform rebuilt (``dataset``
    itself is left alone). A dataset built elsewhere, one built with the evaluation transform and
    vitprune's own datasets (which augment themselves) come back unchanged when no random augmentation
    is asked, and are refused in one line when it is.
    """
    wanted = _augmentation(augment)
    if isinstance(dataset, Subset):
        inner = augmented(dataset.dataset, augment)
        return dataset if inner is dataset.dataset else Subset(inner, dataset.indices)
    spec = getattr(dataset, _SPEC_ATTR, None)
    if spec is not None and spec.augment == wanted:
        return dataset
    if not wanted and (spec is None or not spec.is_training or spec.input_size is None):
        return dataset
    if spec is None:
        raise VitpruneError(f"random augmentation ({_describe(wanted)}) needs a training set from "
                            "vitprune.data.build_dataset, whose transform vitprune can rebuild")
    if spec.input_size is None:
        _check_own(spec.own, wanted)
    if not spec.is_training:
        raise VitpruneError(f"random augmentation ({_describe(wanted)}) cannot apply to a dataset built with the "
                            "evaluation transform")
    spec = replace(spec, augment=wanted)
    copied = copy.copy(dataset)
    copied.transform = _transform(spec)
    return _record(copied, spec)


def check_augmentation(augment: Mapping[str, Any]) -> None:
    """Raise a one-line error for random augmentation timm cannot build (e.g. a malformed RandAugment policy)."""
    wanted = _augmentation(augment)
    if wanted:
        _transform(_TransformSpec((3, 32, 32), True, None, wanted))


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


def _augmentation(augment: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """The random augmentation ``augment`` asks for, without the settings left off, in a comparable form."""
    augment = dict(augment or {})
    unknown = sorted(set(augment) - set(AUGMENTATIONS))
    if unknown:
        raise ValueError(f"unknown augmentation settings {unknown} (known: {', '.join(AUGMENTATIONS)})")
    return tuple((key, augment[key]) for key, off in AUGMENTATIONS.items() if augment.get(key, off) not in (off, ""))


def _describe(wanted: tuple[tuple[str, Any], ...]) -> str:
    return ", ".join(f"{key} {value}" for key, value in wanted)


def _check_own(name: str, wanted: tuple[tuple[str, Any], ...]) -> None:
    if wanted:
        raise VitpruneError(f"the {name} data augments itself and takes no other random augmentation "
                            f"({_describe(wanted)}); use CIFAR or an image folder")


def _record(dataset: Dataset, spec: _TransformSpec) -> Dataset:
    setattr(dataset, _SPEC_ATTR, spec)
    return dataset


def _labelled(dataset: Dataset, classes: Sequence[str]) -> Dataset:
    setattr(dataset, _CLASSES_ATTR, tuple(classes))
    return dataset


def _names(names: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown}, ... ({len(names)} in all)"


def _named(spec: str, own: list[str], classes: Sequence[str] | None) -> list[str]:
    """The classes of named dataset ``spec``, ``own``, which the model's ``classes`` (if given) must equal."""
    if classes is not None and list(classes) != own:
        raise VitpruneError(f"{spec}'s classes ({_names(own)}) are not the model's ({_names(list(classes))})")
    return own


def _transform(spec: _TransformSpec):
    input_size = spec.input_size
    channels = input_size[0]
    if channels not in _IMAGE_MODES:
        raise VitpruneError(f"image datasets need a model taking 1 or 3 channels, not {channels}")
    args = {**(spec.data_config or {}), "input_size": input_size}
    if channels == 1:
        # Grayscale input: average RGB statistics to one channel rather than broadcasting the image to three.
        mean, std = args.get("mean", IMAGENET_DEFAULT_MEAN), args.get("std", IMAGENET_DEFAULT_STD)
        args.update(mean=(sum(mean) / len(mean),), std=(sum(std) / len(std),))
    cfg = resolve_data_config(args)
    augment = dict(spec.augment)
    if "re_prob" in augment:
        # Erased pixels drawn per pixel from a normal distribution, once per image: DeiT's and timm's training
        # scripts' --remode pixel --recount 1.
        augment.update(re_mode="pixel", re_count=1)
    try:
        transform = create_transform(**cfg, is_training=spec.is_training, **augment)
    except (AssertionError, KeyError, ValueError) as e:  # timm parses the policy string with asserts
        raise VitpruneError(f"timm cannot build the augmentation {_describe(spec.augment)} ({e or type(e).__name__})"
                            ) from None
    _mend_posterize(transform)
    return transform


def posterize(img: Image.Image, bits_to_keep: int, **_kwargs: Any) -> Image.Image:
    """timm's posterize op as it ran under Pillow < 13: keeping 0 bits gives a black image.

    RandAugment's ``inc1`` policies (DeiT's ``rand-m9-mstd0.5-inc1``) keep ``4 - int(4·m/10)`` bits, so 0 at
    magnitude 10, which ``mstd0.5`` reaches in about 2% of the op's draws. Pillow's LUT used to zero the image then;
    Pillow 13 raises instead, which stops a training run in its first epoch on ImageNet.
    """
    if bits_to_keep >= 8:
        return img
    if bits_to_keep <= 0:
        return Image.new(img.mode, img.size)
    return ImageOps.posterize(img, bits_to_keep)


def _mend_posterize(transform: Any) -> None:
    """Point the posterize ops of timm's RandAugment/AutoAugment in ``transform`` at :func:`posterize`."""
    for step in getattr(transform, "transforms", ()):
        ops = getattr(step, "ops", None)
        if ops is None:  # AutoAugment holds sub-policies: lists of ops
            ops = [op for policy in getattr(step, "policy", ()) for op in policy]
        for op in ops:
            if getattr(op, "aug_fn", None) is timm_posterize:
                op.aug_fn = posterize


def _cifar(spec: str, split: str, root: str | None, download: bool, transform_spec: _TransformSpec) -> Dataset:
    timm_name, label = _CIFAR[spec]
    root_dir = Path(root).expanduser() if root else cache_dir() / "data"
    transform = _transform(transform_spec)
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


def _folder_path(spec: str) -> Path:
    path = Path(spec).expanduser()
    if not path.exists():
        if "/" in spec or "\\" in spec or spec.startswith((".", "~")):
            raise VitpruneError(f"data path {spec} does not exist")
        names = ", ".join(NAMED_DATASETS)
        raise VitpruneError(f"unknown dataset {spec!r} (expected one of: {names}, or the path of an image folder)")
    if not path.is_dir():
        raise VitpruneError(f"data path {spec} is not a directory")
    return path


def _layout(path: Path) -> str:
    return f"{path / 'train'}/<class>/<images> and {path / 'val'}/<class>/<images>"


def _split_folders(path: Path, spec: str, val_split: float | None) -> dict[str, Path]:
    """The folder each split of image folder ``spec`` (at ``path``) reads: its split folders, or with ``val_split``
    the flat folder itself for both."""
    found = {}
    for split, names in _SPLIT_FOLDERS.items():
        folder = next((path / name for name in names if (path / name).is_dir()), None)
        if folder is not None:
            found[split] = folder
    if val_split is None:
        if not found:
            # timm would read the flat folder for both splits, so the model would validate on its training images.
            raise VitpruneError(f"{spec} has no train/ and val/ folders: an image folder needs {_layout(path)}, or "
                                "pass --val-split F to hold out a fraction F of its images for validation")
        return found
    if found:
        names = ", ".join(f"{folder.name}/" for folder in found.values())
        raise VitpruneError(f"--val-split splits a flat folder of class folders, but {spec} has split folders "
                            f"({names}); leave --val-split out")
    if not 0 < val_split < 1:
        raise VitpruneError(f"--val-split is the fraction of the images that validate, between 0 and 1; got "
                            f"{val_split:g}")
    return dict.fromkeys(SPLITS, path)


def _held_out(labels: list[int], split: str, fraction: float, seed: int) -> list[int]:
    """The images of ``split`` among a flat folder's, whose ``labels`` are given in folder order: of each class,
    ``round(fraction · its images)`` drawn with ``seed`` validate (so that each class keeps its share of both splits)
    and the others train; in folder order."""
    generator = torch.Generator().manual_seed(seed)
    chosen = set()
    for label in sorted(set(labels)):
        members = [i for i, y in enumerate(labels) if y == label]
        draw = torch.randperm(len(members), generator=generator)[:round(fraction * len(members))]
        chosen.update(members[j] for j in draw.tolist())
    if not 0 < len(chosen) < len(labels):
        raise VitpruneError(f"--val-split {fraction:g} of {len(labels)} images leaves none to "
                            f"{'validate' if not chosen else 'train'} on")
    return [i for i in range(len(labels)) if (i in chosen) == (split == "val")]


def _image_folder(spec: str, split: str, transform_spec: _TransformSpec, classes: Sequence[str] | None,
                  val_split: float | None, split_seed: int) -> Dataset:
    folders = _split_folders(_folder_path(spec), spec, val_split)
    if split not in folders:
        raise VitpruneError(f"{spec} has no {split}/ folder: an image folder needs {_layout(Path(spec).expanduser())}")
    found = image_folder_classes(spec, val_split=val_split)
    if classes is None:
        classes = found
    elif unknown := [name for name in found if name not in classes]:
        raise VitpruneError(f"{spec} has class folders that are not among the model's classes "
                            f"({_names(list(classes))}): {_names(unknown)}")
    transform = _transform(transform_spec)
    try:
        # One class map for every split, so that a class missing from one split shifts no label.
        dataset = create_dataset(
            "", root=str(folders[split]), split=split, search_split=False, transform=transform,
            class_map={name: index for index, name in enumerate(classes)},
            input_img_mode=_IMAGE_MODES[transform_spec.input_size[0]]
        )
    except RuntimeError as e:  # timm: "Found 0 images in subfolders of ..."
        raise VitpruneError(
            f"no images found in the {split} split of data path {spec} (expected one sub-folder of images per class)"
        ) from e
    dataset = _labelled(_record(dataset, transform_spec), classes)
    labels = [label for _, label in dataset.reader.samples]
    indices = range(len(labels)) if val_split is None else _held_out(labels, split, val_split, split_seed)
    present = {labels[i] for i in indices}
    absent = [name for index, name in enumerate(classes) if index not in present]
    if absent:
        warnings.warn(f"the {split} split of {spec} has no images of {'class' if len(absent) == 1 else 'classes'} "
                      f"{_names(absent)}", VitpruneWarning, stacklevel=3)
    return dataset if val_split is None else Subset(dataset, indices)
