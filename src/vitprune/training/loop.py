"""A small supervised training loop and an evaluator.

:func:`fit` is AdamW with a per-step warmup + cosine schedule (timm's optimizer and scheduler
factories, so norms, biases and position embeddings get no weight decay). Each stage is its own
function -- :func:`train_one_epoch` runs :func:`train_step` over a loader -- so later features
(distillation, distributed training, checkpoints) can replace one stage without rewriting the rest.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sized
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from timm.scheduler.scheduler import Scheduler
from torch import nn
from torch.utils.data import DataLoader

from vitprune.errors import VitpruneError


def fit(
    model: nn.Module,
    train_loader: DataLoader,
    *,
    epochs: int,
    lr: float,
    weight_decay: float = 0.05,
    warmup_epochs: float = 0.0,
    label_smoothing: float = 0.0,
    seed: int = 0,
    progress: bool = True,
) -> list[dict[str, float]]:
    """Train ``model`` in place on ``train_loader``; returns one ``{epoch, loss, top1, lr}`` dict per epoch.

    ``loss`` and ``top1`` are the epoch's training averages (top1 as a fraction in [0, 1]) and ``lr``
    the rate after its last step. The learning rate warms up linearly over ``warmup_epochs``
    (fractions allowed), then follows a cosine to zero, updated every step. ``seed`` seeds torch's
    and Python's global RNGs (dropout, data augmentation) for the duration of the call only, and the
    model's train/eval mode is restored afterwards. ``progress`` shows a rich progress bar on
    stderr; with ``False`` nothing is printed.
    """
    if epochs < 1:
        raise VitpruneError(f"epochs must be at least 1, got {epochs}")
    steps_per_epoch = len(train_loader)
    if steps_per_epoch == 0:
        raise VitpruneError("cannot train on an empty dataset")
    device = _model_device(model)
    optimizer = create_optimizer_v2(model, "adamw", lr=lr, weight_decay=weight_decay)
    scheduler = CosineLRScheduler(
        optimizer,
        t_initial=epochs * steps_per_epoch,
        warmup_t=round(warmup_epochs * steps_per_epoch),
        warmup_lr_init=lr * 1e-3,
        t_in_epochs=False,
    )
    criterion = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
    history = []
    was_training = model.training
    model.train()
    with _seeded(seed, device), _progress_bar(progress) as bar:
        task = bar.add_task("training", total=epochs * steps_per_epoch, stats="")

        def show(loss: float, top1: float) -> None:
            bar.update(task, advance=1, stats=f"loss {loss:.3f}  acc {top1:.3f}")

        for epoch in range(epochs):
            bar.update(task, description=f"epoch {epoch + 1}/{epochs}")
            stats = train_one_epoch(
                model, train_loader, optimizer, scheduler, criterion,
                device=device, first_step=epoch * steps_per_epoch, on_step=show,
            )
            history.append({"epoch": epoch + 1, **stats})
    model.train(was_training)
    return history


def train_one_epoch(
    model: nn.Module,
    loader: Iterable[tuple[torch.Tensor, torch.Tensor]],
    optimizer: torch.optim.Optimizer,
    scheduler: Scheduler,
    criterion: nn.Module,
    *,
    device: torch.device,
    first_step: int = 0,
    on_step: Callable[[float, float], None] | None = None,
) -> dict[str, float]:
    """One pass over ``loader``; returns the epoch's mean ``loss``, training ``top1`` and final ``lr``.

    ``on_step(running_loss, running_top1)`` is called after every step (the progress bar hooks in here).
    """
    loss_sum, correct, count = 0.0, 0, 0
    step = first_step
    for images, targets in loader:
        images, targets = images.to(device), targets.to(device)
        loss, batch_correct = train_step(model, images, targets, optimizer, criterion)
        step += 1
        scheduler.step_update(num_updates=step)
        loss_sum += loss * len(targets)
        correct += batch_correct
        count += len(targets)
        if on_step is not None:
            on_step(loss_sum / count, correct / count)
    return {"loss": loss_sum / count, "top1": correct / count, "lr": optimizer.param_groups[0]["lr"]}


def train_step(
    model: nn.Module,
    images: torch.Tensor,
    targets: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    criterion: nn.Module,
) -> tuple[float, int]:
    """One optimisation step; returns the batch's loss and number of correct top-1 predictions."""
    logits = model(images)
    loss = criterion(logits, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item(), int((logits.argmax(dim=1) == targets).sum())


@torch.inference_mode()
def evaluate(
    model: nn.Module, loader: Iterable[tuple[torch.Tensor, torch.Tensor]], *, device: torch.device | str | None = None,
    progress: bool = False,
) -> dict[str, float]:
    """Accuracy and loss of ``model`` over ``loader``.

    Returns ``top1`` (a fraction in [0, 1]), ``top5`` (only when the model has at least 5 classes),
    ``loss`` (mean cross-entropy) and ``count`` (number of samples). The model's train/eval mode is
    restored afterwards. ``progress`` shows a bar on stderr.
    """
    device = torch.device(device) if device is not None else _model_device(model)
    was_training = model.training
    model.eval()
    try:
        loss_sum, top1, top5, count, num_classes = 0.0, 0, 0, 0, 0
        with _progress_bar(progress) as bar:
            task = bar.add_task("evaluating", total=len(loader) if isinstance(loader, Sized) else None, stats="")
            for images, targets in bar.track(loader, task_id=task):
                images, targets = images.to(device), targets.to(device)
                logits = model(images)
                num_classes = logits.shape[1]
                loss_sum += F.cross_entropy(logits, targets, reduction="sum").item()
                hits = logits.topk(min(5, num_classes), dim=1).indices == targets[:, None]
                top1 += int(hits[:, 0].sum())
                top5 += int(hits.any(dim=1).sum())
                count += len(targets)
    finally:
        model.train(was_training)
    if count == 0:
        raise VitpruneError("cannot evaluate on an empty dataset")
    metrics = {"top1": top1 / count, "loss": loss_sum / count, "count": count}
    if num_classes >= 5:
        metrics["top5"] = top5 / count
    return metrics


def _model_device(model: nn.Module) -> torch.device:
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


@contextmanager
def _seeded(seed: int, device: torch.device) -> Iterator[None]:
    # fork_rng restores torch's RNG state on exit; Python's is saved by hand.
    python_state = random.getstate()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        random.seed(seed)
        try:
            yield
        finally:
            random.setstate(python_state)


@contextmanager
def _progress_bar(enabled: bool) -> Iterator[Progress]:
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[stats]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not enabled,
    )
    with bar:
        yield bar


__all__ = ["evaluate", "fit", "train_one_epoch", "train_step"]
