"""balanced_subset: even class counts, the same items for the same seed, labels read from every dataset kind."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from PIL import Image
from torch.utils.data import Dataset, Subset

from vitprune.data import DigitsDataset, balanced_subset, build_dataset
from vitprune.errors import VitpruneError


class _Items(Dataset):
    """A dataset exposing its labels only through its items."""

    def __init__(self, labels: list[int]) -> None:
        self.items = [(torch.full((1,), float(i)), y) for i, y in enumerate(labels)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        return self.items[index]


class _Targets(_Items):
    """Labels in a torchvision-style ``targets`` list; items are never read for them."""

    def __init__(self, labels: list[int]) -> None:
        super().__init__(labels)
        self.targets = labels

    def __getitem__(self, index: int):
        raise AssertionError("labels must come from .targets")


def _counts(subset: Subset, labels: list[int]) -> Counter:
    return Counter(labels[i] for i in subset.indices)


def test_digits_subset_is_balanced_and_seeded():
    data = DigitsDataset("train")
    labels = data.labels.tolist()
    subset = balanced_subset(data, 53, seed=3)
    assert isinstance(subset, Subset) and subset.dataset is data
    assert subset.indices == sorted(set(subset.indices)) and len(subset) == 53
    # 53 = 10 * 5 + 3: the three lowest labels take one extra each.
    assert _counts(subset, labels) == Counter({c: 6 if c < 3 else 5 for c in range(10)})
    assert balanced_subset(data, 53, seed=3).indices == subset.indices
    assert balanced_subset(data, 53, seed=4).indices != subset.indices
    # Growing the subset keeps what a smaller one chose: classes take turns in a fixed per-class order.
    assert set(subset.indices) < set(balanced_subset(data, 80, seed=3).indices)


def test_short_classes_are_exhausted_and_the_others_fill_in():
    labels = [0, 0] + [1] * 10 + [2] * 10
    subset = balanced_subset(_Items(labels), 12, seed=0)
    assert _counts(subset, labels) == Counter({0: 2, 1: 5, 2: 5})
    assert balanced_subset(_Items(labels), 100, seed=0).indices == list(range(len(labels)))


def test_labels_are_read_without_loading_images(tmp_path):
    labels = [1, 0, 1, 0, 1, 1]
    subset = balanced_subset(_Targets(labels), 4, seed=0)
    assert _counts(subset, labels) == Counter({0: 2, 1: 2})
    # Through a Subset: indices are the subset's own.
    inner = Subset(_Targets(labels), [0, 2, 3, 4, 5])
    assert _counts(balanced_subset(inner, 2, seed=0), [labels[i] for i in inner.indices]) == Counter({0: 1, 1: 1})
    # timm's image folder keeps (path, label) pairs in its reader.
    for name, count in (("cat", 3), ("dog", 1)):
        (tmp_path / "train" / name).mkdir(parents=True)
        for i in range(count):
            Image.new("RGB", (8, 8)).save(tmp_path / "train" / name / f"{i}.png")
    folder = build_dataset(str(tmp_path), "train", input_size=(3, 8, 8))
    assert sorted(folder.reader[i][1] for i in balanced_subset(folder, 2, seed=0).indices) == [0, 1]


def test_size_must_be_positive():
    with pytest.raises(VitpruneError, match="subset size must be at least 1, got 0"):
        balanced_subset(_Items([0, 1]), 0, seed=0)
