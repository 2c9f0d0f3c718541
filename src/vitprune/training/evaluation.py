"""Evaluation of a classifier: top-1/top-5 accuracy and loss over a loader (training lives in ``engine``)."""

from __future__ import annotations

from collections.abc import Iterable, Sized
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vitprune.errors import VitpruneError
from vitprune.training.progress import progress_bar


@torch.inference_mode()
def evaluate(
    model: nn.Module, loader: Iterable[tuple[torch.Tensor, torch.Tensor]], *, device: torch.device | str | None = None,
    progress: bool = False, per_image: bool = False,
) -> dict[str, Any]:
    """Accuracy and loss of ``model`` over ``loader``.

    Returns ``top1`` (a fraction in [0, 1]), ``top5`` (only when the model has at least 5 classes),
    ``loss`` (mean cross-entropy) and ``count`` (number of samples). The model's train/eval mode is
    restored afterwards. ``progress`` shows a bar on stderr. ``per_image`` adds ``correct``: a bool tensor, in the
    loader's order, of the images whose top-1 is right (what paired comparisons of two models need).
    """
    device = torch.device(device) if device is not None else _model_device(model)
    was_training = model.training
    model.eval()
    try:
        loss_sum, top1, top5, count, num_classes = 0.0, 0, 0, 0, 0
        correct: list[torch.Tensor] = []
        with progress_bar(progress) as bar:
            task = bar.add_task("evaluating", total=len(loader) if isinstance(loader, Sized) else None, stats="")
            for images, targets in bar.track(loader, task_id=task):
                images, targets = images.to(device), targets.to(device)
                logits = model(images)
                num_classes = logits.shape[1]
                loss_sum += F.cross_entropy(logits, targets, reduction="sum").item()
                hits = logits.topk(min(5, num_classes), dim=1).indices == targets[:, None]
                top1 += int(hits[:, 0].sum())
                if per_image:
                    correct.append(hits[:, 0].cpu())
                top5 += int(hits.any(dim=1).sum())
                count += len(targets)
    finally:
        model.train(was_training)
    if count == 0:
        raise VitpruneError("cannot evaluate on an empty dataset")
    metrics = {"top1": top1 / count, "loss": loss_sum / count, "count": count}
    if num_classes >= 5:
        metrics["top5"] = top5 / count
    if per_image:
        metrics["correct"] = torch.cat(correct)
    return metrics


def _model_device(model: nn.Module) -> torch.device:
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


__all__ = ["evaluate"]
