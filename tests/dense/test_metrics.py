"""mIoU and mAP as the papers count them, on predictions whose scores are known."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from vitprune.dense import detection_scores, segmentation_scores
from vitprune.errors import VitpruneError

pytest.importorskip("torchmetrics")
pytest.importorskip("pycocotools")


class _Replay(nn.Module):
    """A model that answers each call with the next of ``outputs`` (a parameter, so that it has a device)."""

    def __init__(self, outputs: list) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        self.outputs = iter(outputs)

    def forward(self, images):
        return next(self.outputs)


def _masks(seed: int) -> torch.Tensor:
    return torch.randint(0, 4, (2, 8, 8), generator=torch.Generator().manual_seed(seed))


def test_segmentation_scores_count_over_the_whole_set():
    masks = [_masks(0), _masks(1)]
    batches = [(torch.zeros(2, 1, 8, 8), [{"mask": m} for m in batch]) for batch in masks]
    perfect = _Replay([nn.functional.one_hot(m, 4).permute(0, 3, 1, 2).float() for m in masks])
    assert segmentation_scores(perfect, batches, 4) == {"miou": 1.0, "pixel_accuracy": 1.0}
    background = _Replay([torch.zeros(2, 4, 8, 8).index_fill_(1, torch.tensor([0]), 1.0)] * 2)
    everything = torch.cat(masks)
    share = float((everything == 0).float().mean())
    # Background's IoU is its share of the pixels (it is predicted everywhere); the other classes' is 0.
    scores = segmentation_scores(background, batches, 4)
    assert scores["pixel_accuracy"] == pytest.approx(share)
    assert scores["miou"] == pytest.approx(share / 4)


def test_per_image_counts_sum_to_the_sets_miou():
    """Each image's intersection and union per class, summed over the images, give the whole set's mIoU."""
    masks = [_masks(0), _masks(1)]
    batches = [(torch.zeros(2, 1, 8, 8), [{"mask": m} for m in batch]) for batch in masks]
    guesses = [_masks(2), _masks(3)]
    replay = _Replay([nn.functional.one_hot(g, 4).permute(0, 3, 1, 2).float() for g in guesses])
    scores = segmentation_scores(replay, batches, 4, per_image=True)
    assert scores["intersection"].shape == scores["union"].shape == (4, 4)
    truth, guess = torch.cat(masks), torch.cat(guesses)
    for image in range(4):
        for c in range(4):
            t, g = truth[image] == c, guess[image] == c
            assert scores["intersection"][image, c] == int((t & g).sum())
            assert scores["union"][image, c] == int((t | g).sum())
    summed = scores["intersection"].sum(0) / scores["union"].sum(0)
    assert scores["miou"] == pytest.approx(float(summed.mean()))


def test_detection_scores_are_cocos_box_map():
    boxes = torch.tensor([[2.0, 2.0, 12.0, 12.0], [20.0, 20.0, 40.0, 40.0]])
    targets = [{"boxes": boxes, "labels": torch.tensor([1, 2])}]
    batches = [(torch.zeros(1, 1, 64, 64), targets)]
    exact = [{"boxes": boxes, "labels": torch.tensor([1, 2]), "scores": torch.tensor([0.9, 0.8])}]
    assert detection_scores(_Replay([exact]), batches) == {"map": 1.0, "map_50": 1.0, "map_75": 1.0}
    # Each box shifted right by a quarter of its width: IoU 0.75 / 1.25 = 0.6, a hit at IoU 0.5 and a miss at 0.75.
    shifted = boxes + torch.tensor([[2.5, 0.0, 2.5, 0.0], [5.0, 0.0, 5.0, 0.0]])
    moved = [{"boxes": shifted, "labels": torch.tensor([1, 2]), "scores": torch.tensor([0.9, 0.8])}]
    scores = detection_scores(_Replay([moved]), batches)
    assert scores["map_50"] == 1.0 and scores["map_75"] == 0.0


def test_without_torchmetrics_the_metrics_say_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchmetrics", None)
    with pytest.raises(VitpruneError, match=r"pip install 'vitprune\[dense\]'"):
        segmentation_scores(_Replay([]), [], 4)
