"""mIoU and mAP as the papers count them, on predictions whose scores are known."""

from __future__ import annotations

import contextlib
import io
import json
import sys

import numpy as np
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


def _scene(seed: int, images: int = 12) -> tuple[list, list]:
    """Random ground truths (1-3 boxes of 3 classes per image) and detections near some of them, with false
    positives and missed boxes: ``(targets, detections)``, one of each per image."""
    gen = torch.Generator().manual_seed(seed)
    targets, found = [], []
    for _ in range(images):
        count = int(torch.randint(1, 4, (), generator=gen))
        corner = torch.rand(count, 2, generator=gen) * 40
        boxes = torch.cat([corner, corner + 8 + torch.rand(count, 2, generator=gen) * 16], dim=1)
        labels = torch.randint(1, 4, (count,), generator=gen)
        targets.append({"boxes": boxes, "labels": labels})
        guesses = boxes + torch.randn(count, 4, generator=gen)
        extra = int(torch.randint(0, 3, (), generator=gen))
        stray = torch.rand(extra, 2, generator=gen) * 40
        guesses = torch.cat([guesses, torch.cat([stray, stray + 10], dim=1)])
        guessed = torch.cat([torch.where(torch.rand(count, generator=gen) < 0.8, labels, labels % 3 + 1),
                             torch.randint(1, 4, (extra,), generator=gen)])
        found.append({"boxes": guesses, "labels": guessed, "scores": torch.rand(count + extra, generator=gen)})
    return targets, found


def _batches(targets: list, found: list, order: list[int]) -> tuple[list, _Replay]:
    """One-image batches of the scene's images in ``order`` (an image may come several times, or not at all), and
    the detector that answers them."""
    batches = [(torch.zeros(1, 1, 64, 64), [targets[i]]) for i in order]
    return batches, _Replay([[found[i]] for i in order])


def _pycocotools_map(targets: list, found: list) -> dict[str, float]:
    """pycocotools' own box mAP, mAP@0.5 and mAP@0.75 of the images ``targets`` with detections ``found``."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    def dataset(items: list, scored: bool) -> COCO:
        annotations = []
        for image, item in enumerate(items):
            for n, ((x1, y1, x2, y2), label) in enumerate(zip(item["boxes"].tolist(), item["labels"].tolist())):
                annotations.append({"id": len(annotations) + 1, "image_id": image, "category_id": label,
                                    "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1), "iscrowd": 0,
                                    **({"score": float(item["scores"][n])} if scored else {})})
        coco = COCO()
        coco.dataset = {"images": [{"id": i} for i in range(len(items))], "annotations": annotations,
                        "categories": [{"id": c} for c in (1, 2, 3)]}
        with contextlib.redirect_stdout(io.StringIO()):
            coco.createIndex()
        return coco

    evaluation = COCOeval(dataset(targets, False), dataset(found, True), iouType="bbox")
    with contextlib.redirect_stdout(io.StringIO()):
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return dict(zip(("map", "map_50", "map_75"), evaluation.stats[:3]))


def test_detection_matches_give_cocos_map_of_any_weighting_of_the_images():
    """Ones: COCO's mAP of the set (torchmetrics'); integer weights: pycocotools' mAP of the set holding each image
    that many times (a weight of 0 drops it), which is what a resample of the images is."""
    from vitprune.dense import detection_matches

    targets, found = _scene(0)
    batches, replay = _batches(targets, found, list(range(len(targets))))
    matches = detection_matches(replay, batches)
    batches, replay = _batches(targets, found, list(range(len(targets))))
    expected = detection_scores(replay, batches)
    assert 0.2 < expected["map"] < 0.9  # neither trivial nor perfect
    weights = np.random.default_rng(0).multinomial(len(targets), np.full(len(targets), 1 / len(targets)), size=3)
    got = matches.average_precision(np.vstack([np.ones(len(targets)), weights]))
    for name in ("map", "map_50", "map_75"):
        assert got[name][0] == pytest.approx(expected[name], abs=1e-6)
    for row, w in enumerate(weights, start=1):
        order = [i for i, times in enumerate(w) for _ in range(times)]
        resampled = _pycocotools_map([targets[i] for i in order], [found[i] for i in order])
        for name in ("map", "map_50", "map_75"):
            assert got[name][row] == pytest.approx(resampled[name], abs=1e-12), (row, name)
    again = type(matches).from_dict(json.loads(json.dumps(matches.to_dict())))
    assert all(np.array_equal(getattr(again, f), getattr(matches, f)) for f in matches.__dataclass_fields__)
    # the ground truths each image's confident detections find at IoU 0.5
    assert len(matches.found()) == len(targets) and any(matches.found())


def test_map_differences_pair_images_and_seeds():
    """Two detectors on the same images under two seeds: the difference's effect is the mean of the seeds' mAP
    differences, its interval holds it, and an arm against itself differs by exactly 0."""
    from vitprune.dense import detection_matches
    from vitprune.measure.paired import paired_weighted_difference

    def matches(seed: int, noise: float):
        targets, found = _scene(seed)
        found = [{**f, "boxes": f["boxes"] + noise * torch.randn(f["boxes"].shape,
                                                                 generator=torch.Generator().manual_seed(seed))}
                 for f in found]
        return detection_matches(*reversed(_batches(targets, found, list(range(len(targets))))))

    a, b = [matches(s, 0.0) for s in (1, 2)], [matches(s, 2.0) for s in (1, 2)]

    def arm(ms):
        return [lambda w, m=m: 100 * m.average_precision(w)["map"] for m in ms]

    result = paired_weighted_difference(arm(a), arm(b), a[0].images, discordant=0.5, resamples=500)
    per_seed = [100 * (x.average_precision(np.ones(x.images))["map"][0] - y.average_precision(np.ones(y.images))
                       ["map"][0]) for x, y in zip(a, b)]
    assert result.effect == pytest.approx(np.mean(per_seed)) and result.low <= result.effect <= result.high
    assert (result.seeds, result.images, result.discordant) == (2, 12, 0.5)
    same = paired_weighted_difference(arm(a), arm(a), a[0].images, discordant=0.0, resamples=200)
    assert (same.effect, same.low, same.high) == (0.0, 0.0, 0.0)


def test_without_torchmetrics_the_metrics_say_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchmetrics", None)
    with pytest.raises(VitpruneError, match=r"pip install 'vitprune\[dense\]'"):
        segmentation_scores(_Replay([]), [], 4)
