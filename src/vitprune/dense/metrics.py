"""mIoU and mAP of a segmenter and a detector on a dense dataset, through torchmetrics (the optional extra
``vitprune[dense]``; mAP's COCO evaluation runs on pycocotools), and COCO's mAP of any weighting of the images, which
paired statistics resample (:class:`DetectionMatches`)."""

from __future__ import annotations

import base64
import contextlib
import io
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from vitprune.errors import VitpruneError


def _torchmetrics() -> Any:
    try:
        import torchmetrics
    except ImportError:
        raise VitpruneError("dense-prediction metrics need torchmetrics: pip install 'vitprune[dense]'") from None
    return torchmetrics


def _device(module: nn.Module) -> torch.device:
    return next(module.parameters()).device


@torch.no_grad()
def segmentation_scores(segmenter: nn.Module, batches: Iterable[tuple[torch.Tensor, list[dict[str, Any]]]],
                        num_classes: int, *, per_image: bool = False) -> dict[str, Any]:
    """Mean IoU and pixel accuracy of ``segmenter`` on ``batches`` of ``(images, targets)`` with ``mask`` targets
    (:func:`~vitprune.data.collate_dense`'s batches); ``per_image`` adds each image's pixels of intersection and of
    union per class (``intersection``, ``union``: ``[images, num_classes]``), from which paired statistics
    resample mIoU (:func:`~vitprune.measure.paired.paired_metric_difference`).

    The IoU of each of ``num_classes`` classes (the background one of them) is taken over the whole set, its pixels'
    intersection over their union, and mIoU is their mean: the convention of ADE20K's and the papers' mIoU
    (torchmetrics' multiclass Jaccard index, macro average), not a mean of per-image scores."""
    metrics = _torchmetrics()
    miou = metrics.classification.MulticlassJaccardIndex(num_classes=num_classes, average="macro")
    correct = total = 0
    counts = []
    was_training = segmenter.training
    segmenter.eval()
    device = _device(segmenter)
    for images, targets in batches:
        predicted = segmenter(images.to(device)).argmax(dim=1).cpu()
        masks = torch.stack([t["mask"] for t in targets])
        miou.update(predicted.flatten(), masks.flatten())
        if per_image:
            counts.append(metrics.functional.classification.multiclass_stat_scores(
                predicted, masks, num_classes, average=None, multidim_average="samplewise"))
        correct += int((predicted == masks).sum())
        total += masks.numel()
    segmenter.train(was_training)
    scores: dict[str, Any] = {"miou": float(miou.compute()), "pixel_accuracy": correct / total}
    if per_image:
        tp, fp, _, fn, _ = torch.cat(counts).unbind(dim=2)  # [images, classes] each
        scores.update(intersection=tp, union=tp + fp + fn)
    return scores


@torch.no_grad()
def detection_scores(detector: nn.Module,
                     batches: Iterable[tuple[torch.Tensor, list[dict[str, Any]]]]) -> dict[str, float]:
    """COCO's box mAP (IoU 0.5:0.95), mAP at IoU 0.5 and 0.75 of ``detector`` (a torchvision detection model) on
    ``batches`` of ``(images, targets)`` with ``boxes`` and ``labels`` targets."""
    metrics = _torchmetrics()
    average_precision = metrics.detection.MeanAveragePrecision(box_format="xyxy", iou_type="bbox")
    was_training = detector.training
    detector.eval()
    device = _device(detector)
    for images, targets in batches:
        found = detector(list(images.to(device)))
        average_precision.update([{k: v.cpu() for k, v in f.items()} for f in found],
                                 [{"boxes": t["boxes"], "labels": t["labels"]} for t in targets])
    detector.train(was_training)
    scores = average_precision.compute()
    return {"map": float(scores["map"]), "map_50": float(scores["map_50"]), "map_75": float(scores["map_75"])}


@dataclass(frozen=True)
class DetectionMatches:
    """What COCO's box evaluation found on each image (pycocotools' per-image matching, its area range "all" and 100
    detections per image), from which :meth:`average_precision` gives COCO's mAP of any weighting of the images.

    Detections are in pycocotools' accumulation order: class by class, image by image, each image's by falling
    score. ``hit[t, d]``: detection ``d`` matches a ground truth at the ``t``-th IoU threshold (0.5:0.05:0.95);
    ``ignored[t, d]``: that match does not count; ``truth[d]``: the id of the ground truth it matches at IoU 0.5 (0:
    none); ``truths[i, k]``: the ground truths of class ``classes[k]`` on image ``i`` that count."""

    classes: np.ndarray
    image: np.ndarray
    label: np.ndarray
    score: np.ndarray
    hit: np.ndarray
    ignored: np.ndarray
    truth: np.ndarray
    truths: np.ndarray

    @property
    def images(self) -> int:
        return self.truths.shape[0]

    def average_precision(self, weights: np.ndarray) -> dict[str, np.ndarray]:
        """COCO's ``map``, ``map_50`` and ``map_75`` (fractions, ``[n]``) of the set with its images weighted by each
        row of ``weights`` ``[n, images]``: with integer weights, what pycocotools gives for the set holding each
        image that many times (ones: the set itself)."""
        weights = np.atleast_2d(np.asarray(weights, dtype=np.float64))
        recall_points = np.linspace(0.0, 1.0, 101)
        precision = np.full((self.hit.shape[0], len(self.classes), len(weights)), np.nan)
        for k, label in enumerate(self.classes):
            truths = weights @ self.truths[:, k]
            chosen = self.label == label
            # pycocotools' order: a stable sort by falling score of the class's detections in accumulation order.
            order = np.argsort(-self.score[chosen], kind="mergesort")
            counted = weights[:, self.image[chosen][order]]
            for t in range(self.hit.shape[0]):
                kept = ~self.ignored[t, chosen][order]
                hit = self.hit[t, chosen][order]
                tp = np.cumsum(counted * (hit & kept), axis=1)
                fp = np.cumsum(counted * (~hit & kept), axis=1)
                precision[t, k] = np.where(truths > 0, _interpolated_precision(tp, fp, truths, recall_points), np.nan)
        return {"map": np.nanmean(precision, axis=(0, 1)), "map_50": np.nanmean(precision[0], axis=0),
                "map_75": np.nanmean(precision[5], axis=0)}

    def found(self, score: float = 0.5) -> list[frozenset[int]]:
        """Each image's ground truths that a detection scoring at least ``score`` matches at IoU 0.5."""
        out: list[set[int]] = [set() for _ in range(self.images)]
        taken = (self.score >= score) & (self.truth > 0)
        for image, truth in zip(self.image[taken].tolist(), self.truth[taken].tolist()):
            out[image].add(truth)
        return [frozenset(x) for x in out]

    def to_dict(self) -> dict[str, str]:
        """Each array as compressed text (``numpy.save``'s format, no pickle), for a JSON store."""
        return {name: _pack(getattr(self, name)) for name in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> DetectionMatches:
        return cls(**{name: _unpack(data[name]) for name in cls.__dataclass_fields__})


def _pack(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return base64.b64encode(zlib.compress(buffer.getvalue(), 9)).decode("ascii")


def _unpack(text: str) -> np.ndarray:
    return np.load(io.BytesIO(zlib.decompress(base64.b64decode(text))), allow_pickle=False)


def _interpolated_precision(tp: np.ndarray, fp: np.ndarray, truths: np.ndarray,
                            recall_points: np.ndarray) -> np.ndarray:
    """pycocotools' average precision of ``[n, detections]`` cumulative true and false positives over ``truths``
    ``[n]``: the precision envelope read at each recall point, 0 past the last recall, then averaged."""
    n, count = tp.shape
    if count == 0:
        return np.zeros(n)
    # A row with no ground truth (its AP is left out) gets recall 0: the single search below needs every row finite.
    recall = np.where(truths[:, None] > 0, tp / np.maximum(truths, 1)[:, None], 0.0)
    precision = tp / (fp + tp + np.spacing(1))
    envelope = np.maximum.accumulate(precision[:, ::-1], axis=1)[:, ::-1]
    # One search over all rows: each row's recall (at most 1) shifted by twice its row number stays sorted.
    shift = 2.0 * np.arange(n)[:, None]
    flat = np.searchsorted((recall + shift).ravel(), (recall_points + shift).ravel(), side="left").reshape(n, -1)
    index = flat - count * np.arange(n)[:, None]
    inside = index < count
    read = np.take_along_axis(envelope, np.minimum(index, count - 1), axis=1)
    return np.where(inside, read, 0.0).mean(axis=1)


@torch.no_grad()
def detection_matches(detector: nn.Module,
                      batches: Iterable[tuple[torch.Tensor, list[dict[str, Any]]]]) -> DetectionMatches:
    """Run ``detector`` (a torchvision detection model) on ``batches`` as :func:`detection_scores` does and keep what
    COCO's evaluation (pycocotools) matched on each image: :class:`DetectionMatches`."""
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError:
        raise VitpruneError("box mAP needs pycocotools: pip install 'vitprune[dense]'") from None
    was_training = detector.training
    detector.eval()
    device = _device(detector)
    found, truths = [], []
    for images, targets in batches:
        found += [{k: v.cpu() for k, v in f.items()} for f in detector(list(images.to(device)))]
        truths += [{"boxes": t["boxes"], "labels": t["labels"]} for t in targets]
    detector.train(was_training)
    classes = sorted({int(x) for group in (found, truths) for item in group for x in item["labels"]})

    def dataset(items: list[dict[str, torch.Tensor]], scored: bool) -> Any:
        annotations = []
        for image, item in enumerate(items):
            for n, (box, label) in enumerate(zip(item["boxes"].tolist(), item["labels"].tolist())):
                x1, y1, x2, y2 = box
                annotations.append({"id": len(annotations) + 1, "image_id": image, "category_id": int(label),
                                    "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1),
                                    "iscrowd": 0, **({"score": float(item["scores"][n])} if scored else {})})
        coco = COCO()
        coco.dataset = {"images": [{"id": i} for i in range(len(items))], "annotations": annotations,
                        "categories": [{"id": c} for c in classes]}
        with contextlib.redirect_stdout(io.StringIO()):
            coco.createIndex()
        return coco

    evaluation = COCOeval(dataset(truths, False), dataset(found, True), iouType="bbox")
    with contextlib.redirect_stdout(io.StringIO()):
        evaluation.evaluate()
    areas, images = len(evaluation.params.areaRng), len(truths)
    columns: dict[str, list[Any]] = {"image": [], "label": [], "score": [], "matched": [], "ignored": []}
    counts = np.zeros((images, len(classes)), dtype=np.int32)
    for k, label in enumerate(classes):
        for image in range(images):
            e = evaluation.evalImgs[(k * areas) * images + image]  # area range 0: "all"
            if e is None:
                continue
            counts[image, k] = np.count_nonzero(e["gtIgnore"] == 0)
            columns["image"] += [image] * len(e["dtScores"])
            columns["label"] += [label] * len(e["dtScores"])
            columns["score"] += list(e["dtScores"])
            columns["matched"].append(e["dtMatches"])
            columns["ignored"].append(e["dtIgnore"])
    thresholds = len(evaluation.params.iouThrs)
    matched, ignored = (np.concatenate(columns[name], axis=1) if columns[name] else np.zeros((thresholds, 0))
                        for name in ("matched", "ignored"))
    return DetectionMatches(classes=np.asarray(classes, dtype=np.int32), image=np.asarray(columns["image"], np.int32),
                            label=np.asarray(columns["label"], np.int32),
                            score=np.asarray(columns["score"], np.float32), hit=matched > 0,
                            ignored=ignored.astype(bool), truth=matched[0].astype(np.int32), truths=counts)
