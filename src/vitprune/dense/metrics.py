"""mIoU and mAP of a segmenter and a detector on a dense dataset, through torchmetrics (the optional extra
``vitprune[dense]``; mAP's COCO evaluation runs on pycocotools)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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
