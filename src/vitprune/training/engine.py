"""The fine-tuning engine every method uses to recover accuracy after structural edits.

One :class:`Trainer` runs epochs of optimisation steps with AMP (on CUDA), gradient accumulation,
clipping, optional EMA and a per-step warm-up + cosine schedule (timm's optimizer and scheduler
factories), and DeiT's regularisation where its config asks: mixup/cutmix, label smoothing,
RandAugment and random erasing (the training set's transform, :func:`vitprune.data.augmented`),
stochastic depth and repeated augmentation. Methods plug in through :class:`TrainHooks` (extra
loss terms, their own schedules, parameter groups with their own learning rates). Runs checkpoint
atomically into a run directory and resume exactly where they stopped, mid-epoch included; Ctrl-C
saves and exits cleanly, and a non-finite loss stops the run, keeping the last good checkpoint.
Every image is augmented under a seed of its own (its place in the epoch's order), so the result
does not depend on the number of data-loading workers, and a resumed run draws what it would have.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.torch
import torch
from timm.data import Mixup
from timm.data.mixup import mixup_target
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from timm.utils import ModelEmaV3
from torch import nn
from torch.utils.data import DataLoader, Dataset

from vitprune.adapters import find_adapter
from vitprune.atomic import atomic_directory
from vitprune.config import setting
from vitprune.data import augmented, check_augmentation
from vitprune.errors import VitpruneError, check_settings
from vitprune.recipe import WEIGHTS_FILE, get_recipe, read_document, save
from vitprune.training.distributed import (
    DistContext,
    all_reduce_sum,
    broadcast_object,
    init_distributed,
    reduce_metrics,
    wrap_model,
)
from vitprune.training.evaluation import evaluate
from vitprune.training.sampler import ResumableSampler, SeededSamples

#: Names inside a run directory.
CHECKPOINT_DIR = "checkpoint"
MODEL_DIR = "model"
STATE_FILE = "state.pt"
METRICS_FILE = "metrics.jsonl"

#: The optimizers a run can use.
OPTIMIZERS = ("adamw", "sgd")

#: ``criterion(images, outputs, targets) -> loss``; images are passed so a distillation loss can run its teacher.
Criterion = Callable[[torch.Tensor, Any, torch.Tensor], torch.Tensor]


@dataclass
class TrainConfig:
    """Everything that determines a run's result (saved in each checkpoint and checked on resume)."""

    epochs: int = setting(min=1, help="Training epochs.")
    lr: float = setting(5e-4, help="Peak learning rate (after warm-up).")
    batch_size: int = setting(64, short="-b", min=1, help="Global batch (split over processes).")
    optimizer: str = setting("adamw", choices=OPTIMIZERS, help="Optimizer.")
    momentum: float = setting(0.9, help="SGD momentum.")
    weight_decay: float = setting(0.05, help="Weight decay.")
    warmup_epochs: float = setting(0.0, help="Linear warm-up epochs.")
    #: ``None``: a thousandth of ``lr``. Not scaled with the batch (DeiT scales only the peak lr).
    warmup_lr: float | None = setting(None, help="Learning rate the warm-up starts from (default: lr / 1000).")
    min_lr: float = setting(0.0, help="Learning rate the cosine schedule ends at.")
    label_smoothing: float = setting(0.0, help="Label smoothing.")
    mixup_alpha: float = setting(0.0, flag="--mixup", min=0.0, help="timm mixup alpha (0: off).")
    cutmix_alpha: float = setting(0.0, flag="--cutmix", min=0.0, help="timm cutmix alpha (0: off).")
    #: Applied by the training set's transform: :func:`vitprune.data.augmented` rebuilds it for the run.
    auto_augment: str | None = setting(None, help="timm RandAugment/AutoAugment policy of the training images, e.g. "
                                                  "rand-m9-mstd0.5-inc1 (DeiT's).")
    re_prob: float = setting(0.0, min=0.0, max=1.0, help="Random-erasing probability (per-pixel noise, as DeiT).")
    #: DeiT's RASampler / timm's RepeatAugSampler (:class:`~vitprune.training.sampler.ResumableSampler`).
    aug_repeats: int = setting(1, min=1, help="Repeated augmentation: each image this many times in a row of "
                                              "the epoch's order, spread over the processes (DeiT: 3; 1: off).")
    #: ``None`` leaves the model's own (timm builds models with none).
    drop_path: float | None = setting(None, min=0.0, max=1.0, help="Stochastic depth: the last block's drop-path "
                                                                   "rate, rising from 0 at the first (timm's rule).")
    clip_grad: float | None = setting(None, help="Max gradient norm.")
    accum_steps: int = setting(1, min=1, help="Micro-batches per optimisation step.")
    amp: bool = setting(True, help="Mixed precision on CUDA (ignored on CPU).")
    ema_decay: float | None = setting(None, help="Keep an EMA of the weights with this decay.")
    seed: int = setting(0, help="Seed of initialisation, data order and augmentation.")
    checkpoint_every: int = setting(0, min=0, help="Steps between checkpoints (0: epochs).")
    #: Not part of the result: each image is augmented under its own seed, whichever process loads it.
    workers: int = setting(0, min=0, help="Data-loading worker processes per training process (persistent; "
                                          "pinned memory on CUDA); the result does not depend on it.")

    def validate(self) -> None:
        """Raise a one-line error for settings that cannot run."""
        check_settings([
            (self.epochs >= 1, f"epochs must be at least 1, got {self.epochs}"),
            (self.lr > 0, f"learning rate must be positive, got {self.lr}"),
            (self.batch_size >= 1, f"batch size must be at least 1, got {self.batch_size}"),
            (self.accum_steps >= 1, f"accumulation steps must be at least 1, got {self.accum_steps}"),
            (self.optimizer in OPTIMIZERS, f"unknown optimizer {self.optimizer!r} (use adamw or sgd)"),
            (self.ema_decay is None or 0 < self.ema_decay < 1, f"EMA decay must lie in (0, 1), got {self.ema_decay}"),
            (self.checkpoint_every >= 0, "checkpoint_every must be >= 0 (0: at epoch ends only)"),
            (self.mixup_alpha >= 0 and self.cutmix_alpha >= 0, "mixup and cutmix alphas must be >= 0"),
            (self.warmup_lr is None or self.warmup_lr >= 0, f"warm-up lr must be >= 0, got {self.warmup_lr}"),
            (0 <= self.re_prob <= 1, f"random-erasing probability must lie in [0, 1], got {self.re_prob}"),
            (self.workers >= 0, f"workers must be >= 0, got {self.workers}"),
            (self.aug_repeats >= 1, f"augmentation repeats must be at least 1, got {self.aug_repeats}"),
            (self.drop_path is None or 0 <= self.drop_path < 1,
             f"drop-path rate must lie in [0, 1), got {self.drop_path}"),
        ])
        check_augmentation(self.augment)

    def at_batch(self, batch_size: int) -> TrainConfig:
        """This run at another global batch, its peak learning rate scaled with it (DeiT's and the papers' rule,
        ``lr = base_lr · batch / 512``: presets state the lr for their own batch)."""
        return replace(self, batch_size=batch_size, lr=scaled_lr(self.lr, self.batch_size, batch_size))

    @property
    def augment(self) -> dict[str, Any]:
        """The training images' random augmentation, as :func:`vitprune.data.build_dataset` and
        :func:`vitprune.data.augmented` take it."""
        return {"auto_augment": self.auto_augment, "re_prob": self.re_prob}

    @property
    def mixes(self) -> bool:
        """Whether batches are mixed (mixup or cutmix)."""
        return self.mixup_alpha > 0 or self.cutmix_alpha > 0

    def label_loss(self) -> nn.CrossEntropyLoss:
        """Cross-entropy on the labels, smoothed once: by ``label_smoothing``, or not at all where mixup/cutmix are on,
        since timm's Mixup already folds the smoothing into the soft targets it returns."""
        return nn.CrossEntropyLoss(label_smoothing=0.0 if self.mixes else self.label_smoothing)


class TrainHooks:
    """Extension points for methods; every default does nothing."""

    def param_groups(self, model: nn.Module, config: TrainConfig) -> list[dict] | None:
        """Custom optimizer parameter groups (each may set its own ``lr``), or ``None`` for
        :func:`weight_decay_groups`."""
        return None

    def on_step_start(self, trainer: Trainer) -> None:
        """Before each optimisation step (``trainer.step`` counts completed steps): anneal a temperature, etc."""

    def extra_loss(self, trainer: Trainer, images: torch.Tensor, outputs: Any) -> torch.Tensor | None:
        """A term added to the loss of each micro-batch (e.g. a MAC penalty), or ``None``."""
        return None

    def on_epoch_end(self, trainer: Trainer, stats: dict[str, float]) -> None:
        """After each epoch's statistics are known (entries added to ``stats`` are logged with them)."""

    def state_dict(self) -> dict[str, Any]:
        """The hooks' own state that a resumed run needs (plain values and tensors), saved in each checkpoint."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""


def scaled_lr(lr: float, batch_size: int, new_batch_size: int) -> float:
    """A learning rate set for ``batch_size``, at ``new_batch_size``: linear in the global batch (DeiT's rule)."""
    return lr * new_batch_size / batch_size


def weight_decay_groups(model: nn.Module, weight_decay: float,
                        exclude: Iterable[nn.Parameter] = ()) -> list[dict[str, Any]]:
    """The trainable parameters in timm's two groups: no weight decay on 1-D parameters (norms, biases, LayerScale,
    gates and importance scores) and on the adapter's :meth:`~vitprune.adapters.ViTAdapter.no_decay_parameters`
    (learned tokens, position embeddings, Swin's bias tables); ``weight_decay`` on the rest. ``exclude`` leaves
    parameters out (a method's own groups)."""
    adapter = find_adapter(model)
    skip = {id(p) for p in exclude}
    no_decay_ids = {id(p) for p in adapter.no_decay_parameters()} if adapter is not None else set()
    decay, no_decay = [], []
    for param in model.parameters():
        if not param.requires_grad or id(param) in skip:
            continue
        (no_decay if param.ndim <= 1 or id(param) in no_decay_ids else decay).append(param)
    return [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": weight_decay}]


class _Supervised(nn.Module):
    """The labels' cross-entropy (:meth:`TrainConfig.label_loss`) in the engine's
    ``criterion(images, outputs, targets)`` form."""

    def __init__(self, ce: nn.CrossEntropyLoss) -> None:
        super().__init__()
        self.ce = ce

    def forward(self, images: torch.Tensor, outputs: Any, targets: torch.Tensor) -> torch.Tensor:
        return self.ce(_logits(outputs), targets)


def _logits(outputs: Any) -> torch.Tensor:
    # A distilled DeiT in training mode returns (class-head, distillation-head) logits.
    return outputs[0] if isinstance(outputs, (tuple, list)) else outputs


class Trainer:
    """Fine-tune ``model`` in place on ``train_set``; see the module docstring."""

    def __init__(self, model: nn.Module, train_set: Dataset, config: TrainConfig, *, run_dir: str | Path | None = None,
                 criterion: Criterion | None = None, hooks: TrainHooks | None = None, val_set: Dataset | None = None,
                 device: torch.device | str | None = None, dist: DistContext | None = None) -> None:
        config.validate()
        # Under torchrun each process trains a shard; ``config.batch_size`` is the global batch.
        self.dist = dist if dist is not None else init_distributed(None if device is None else str(device))
        if config.batch_size % self.dist.world_size:
            raise VitpruneError(f"batch size {config.batch_size} does not split evenly over "
                                f"{self.dist.world_size} processes")
        self.device = self.dist.device
        if config.drop_path is not None:
            _set_drop_path(model, config.drop_path)()  # refused here, not after the setup, if it cannot be set
        self.model, self.config = model.to(self.device), config
        self.net = wrap_model(model, self.dist)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.criterion = criterion if criterion is not None else _Supervised(config.label_loss())
        self.hooks = hooks or TrainHooks()
        self.val_set = val_set
        train_set = augmented(train_set, config.augment)
        self.sampler = ResumableSampler(len(train_set), shuffle=True, seed=config.seed, rank=self.dist.rank,
                                        world_size=self.dist.world_size, repeats=config.aug_repeats, seeded=True)
        self.local_batch = config.batch_size // self.dist.world_size
        # timm's Mixup mixes within a batch and folds label smoothing into the soft targets it returns.
        self.mixup = Mixup(mixup_alpha=config.mixup_alpha, cutmix_alpha=config.cutmix_alpha,
                           label_smoothing=config.label_smoothing, num_classes=_num_classes(model)) \
            if config.mixes else None
        if self.mixup is not None and self.local_batch % 2:
            raise VitpruneError(f"mixup/cutmix need an even batch per process, got {self.local_batch}")
        # Its own generator: creating an iterator would otherwise draw from the global RNG that resuming restores.
        # Each image is augmented under its own seed (SeededSamples), so workers change the speed, not the result.
        pinned = config.workers > 0 and self.device.type == "cuda"  # worker batches are CPU tensors
        self.loader = DataLoader(SeededSamples(train_set), batch_size=self.local_batch, sampler=self.sampler,
                                 generator=torch.Generator().manual_seed(config.seed), num_workers=config.workers,
                                 pin_memory=pinned, persistent_workers=config.workers > 0)
        self.batches_per_epoch = len(self.loader)
        self.steps_per_epoch = math.ceil(self.batches_per_epoch / config.accum_steps)
        groups = self.hooks.param_groups(model, config)
        self.optimizer = create_optimizer_v2(groups if groups is not None else weight_decay_groups(model,
                                                                                                  config.weight_decay),
                                             config.optimizer, lr=config.lr, weight_decay=config.weight_decay,
                                             momentum=config.momentum)
        self.scheduler = CosineLRScheduler(
            self.optimizer, t_initial=config.epochs * self.steps_per_epoch,
            warmup_t=round(config.warmup_epochs * self.steps_per_epoch),
            warmup_lr_init=config.lr * 1e-3 if config.warmup_lr is None else config.warmup_lr,
            lr_min=config.min_lr, t_in_epochs=False)
        use_amp = config.amp and self.device.type == "cuda"
        self.amp_dtype = (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16) if use_amp else None
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.ema = ModelEmaV3(model, decay=config.ema_decay) if config.ema_decay else None
        self.epoch, self.batch, self.step = 0, 0, 0
        self._started = False

    # -- the loop -------------------------------------------------------------------------------

    def fit(self, *, resume: bool = False,
            on_batch: Callable[[Trainer, float, float], None] | None = None) -> list[dict]:
        """Run to the last epoch; returns one stats dict per epoch run in this call.

        ``resume`` continues from the run directory's checkpoint, if there is one. ``on_batch`` is
        called after every micro-batch with the epoch's running loss and top-1 accuracy (the progress
        bar hooks in here).
        """
        if not self._started:
            self.start(resume=resume)
        history = []
        # Stochastic depth only while training: the model leaves with the modules its recipe rebuilds.
        restore = _set_drop_path(self.model, self.config.drop_path) if self.config.drop_path is not None else None
        self.model.train()
        try:
            while self.epoch < self.config.epochs:
                stats = self._run_epoch(on_batch)
                self.epoch, self.batch = self.epoch + 1, 0
                stats.update(self._validate())
                self.hooks.on_epoch_end(self, stats)
                history.append(stats)
                self._log(stats)
                self.save_checkpoint()
        except KeyboardInterrupt:
            # Partial accumulation is dropped: resuming is exact when the interrupt falls on a step boundary.
            self.batch -= self.batch % self.config.accum_steps
            self.save_checkpoint()
            raise
        finally:
            if restore is not None:
                restore()
        return history

    def start(self, *, resume: bool = False) -> None:
        """Seed a new run, or (``resume``) restore the run directory's checkpoint; :meth:`fit` calls it if needed.

        Call it first to learn :attr:`epoch` and :attr:`batch` of a resumed run, or to fail early on a
        run directory that already holds a checkpoint.
        """
        if self.run_dir is not None and (self.run_dir / CHECKPOINT_DIR).exists():
            if not resume:
                raise VitpruneError(f"{self.run_dir} already holds a checkpoint; pass --resume to continue it")
            self._resume()
        else:
            _seed_all(self.config.seed)
        self._started = True

    def _run_epoch(self, on_batch: Callable[[Trainer, float, float], None] | None) -> dict[str, float]:
        cfg, start = self.config, time.perf_counter()
        self.sampler.set_epoch(self.epoch, start=self.batch * self.local_batch)
        loss_sum, correct, count = 0.0, 0, 0
        # The loader draws augmentation randomness as it fetches a batch, so the RNG state worth saving is
        # the one at the last batch boundary, not the one at the moment of an interrupt.
        self._boundary_rng = _rng_state()
        for images, targets in self.loader:
            images, targets = images.to(self.device, non_blocking=True), targets.to(self.device, non_blocking=True)
            if self.mixup is not None:
                images, targets = self._mix(images, targets)
            first_of_step = self.batch % cfg.accum_steps == 0
            if first_of_step:
                self.hooks.on_step_start(self)
            loss, batch_correct = self._forward_backward(images, targets)
            self.batch += 1
            last_of_step = self.batch % cfg.accum_steps == 0 or self.batch == self.batches_per_epoch
            if last_of_step:
                self._optimizer_step()
            loss_sum += loss * len(targets)
            correct += batch_correct
            count += len(targets)
            if on_batch is not None:
                on_batch(self, loss_sum / count, correct / count)
            self._boundary_rng = _rng_state()
            if last_of_step and cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0 \
                    and self.batch < self.batches_per_epoch:
                self.save_checkpoint()
        seconds = time.perf_counter() - start
        totals = reduce_metrics({"loss": loss_sum, "top1": correct}, count)
        return {"epoch": self.epoch + 1, "step": self.step, "loss": totals["loss"], "top1": totals["top1"],
                "lr": self.optimizer.param_groups[0]["lr"], "seconds": seconds,
                "images_per_s": totals["count"] / seconds}

    def _validate(self) -> dict[str, float]:
        if self.val_set is None:
            return {}
        metrics = None
        if self.dist.is_main:  # one process sees the whole split, so nothing is padded or counted twice
            loader = DataLoader(self.val_set, batch_size=self.local_batch)
            result = evaluate(self.model, loader, device=self.device)
            metrics = {f"val_{k}": v for k, v in result.items()}
        metrics = broadcast_object(metrics)
        return metrics

    def _mix(self, images: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if len(targets) % 2:  # timm's Mixup pairs samples; an odd last batch keeps its images, smoothed targets
            return images, mixup_target(targets, self.mixup.num_classes, smoothing=self.config.label_smoothing)
        return self.mixup(images, targets)

    def _forward_backward(self, images: torch.Tensor, targets: torch.Tensor) -> tuple[float, int]:
        """Loss of one micro-batch (backpropagated) and its number of correct top-1 predictions."""
        with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
            outputs = self.net(images)
            loss = self.criterion(images, outputs, targets)
            extra = self.hooks.extra_loss(self, images, outputs)
            if extra is not None:
                loss = loss + extra
        value = loss.item()
        # Every process must take the same decision, or the others would wait forever in the next all-reduce.
        if not math.isfinite(float(all_reduce_sum(torch.tensor([value], dtype=torch.float64)))):
            where = f"{self.run_dir / CHECKPOINT_DIR}" if self.run_dir is not None else "not kept (no run directory)"
            raise VitpruneError(f"loss became {value} at epoch {self.epoch + 1}, batch {self.batch + 1}; "
                                f"stopped, the last good checkpoint is {where}")
        labels = targets if targets.ndim == 1 else targets.argmax(dim=1)  # mixed targets: their dominant class
        correct = int((_logits(outputs).argmax(dim=1) == labels).sum())
        del outputs  # the activations' graph must not outlive the backward pass
        self.scaler.scale(loss / self.config.accum_steps).backward()
        return value, correct

    def _optimizer_step(self) -> None:
        if self.config.clip_grad is not None:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_grad)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.scheduler.step_update(num_updates=self.step)
        if self.ema is not None:
            self.ema.update(self.model, step=self.step)

    # -- checkpoints ----------------------------------------------------------------------------

    def save_checkpoint(self) -> None:
        """Write model (recipe format), optimizer, scheduler, scaler, EMA, RNG and position, atomically."""
        if self.run_dir is None:
            return
        if self.dist.is_main:
            self._write_checkpoint()
        if self.dist.world_size > 1:
            torch.distributed.barrier()  # nobody reads or overwrites it before it is complete

    def _write_checkpoint(self) -> None:
        with atomic_directory(self.run_dir / CHECKPOINT_DIR) as tmp:
            save(self.model, tmp / MODEL_DIR)
            state = {
                "config": asdict(self.config), "epoch": self.epoch, "batch": self.batch, "step": self.step,
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(), "rng": self._boundary_rng if self.batch else _rng_state(),
                "hooks": self.hooks.state_dict(),
            }
            torch.save(state, tmp / STATE_FILE)
            if self.ema is not None:
                safetensors.torch.save_model(self.ema.module, str(tmp / "ema.safetensors"))

    def _resume(self) -> None:
        path = self.run_dir / CHECKPOINT_DIR
        state = torch.load(path / STATE_FILE, weights_only=True)
        # The workers only change how fast images arrive, so a run may resume with another count.
        saved, current = ({k: v for k, v in c.items() if k != "workers"}
                          for c in (state["config"], asdict(self.config)))
        if saved != current:
            changed = ", ".join(sorted(k for k in saved if saved[k] != current.get(k)))
            raise VitpruneError(f"cannot resume {self.run_dir}: settings differ from the checkpoint's ({changed})")
        saved = read_document(path / MODEL_DIR)
        if get_recipe(self.model) is not None and saved["edits"] != get_recipe(self.model).to_dict()["edits"]:
            raise VitpruneError(f"cannot resume {self.run_dir}: the model's structure differs from the checkpoint's")
        safetensors.torch.load_model(self.model, str(path / MODEL_DIR / WEIGHTS_FILE), device=str(self.device))
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.hooks.load_state_dict(state.get("hooks", {}))
        if self.ema is not None:
            safetensors.torch.load_model(self.ema.module, str(path / "ema.safetensors"), device=str(self.device))
        self.epoch, self.batch, self.step = state["epoch"], state["batch"], state["step"]
        _set_rng_state(state["rng"])

    def _log(self, stats: dict[str, float]) -> None:
        if self.run_dir is None or not self.dist.is_main:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with (self.run_dir / METRICS_FILE).open("a") as f:
            f.write(json.dumps(stats) + "\n")


def _seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def _set_drop_path(model: nn.Module, rate: float) -> Callable[[], None]:
    """Stochastic depth at ``rate`` on the model's blocks, by its adapter (:meth:`ViTAdapter.set_drop_path`); returns
    the function that puts the model's own modules back."""
    adapter = find_adapter(model)
    if adapter is None:
        raise VitpruneError(f"drop path needs the model's blocks, which a {type(model).__name__} does not declare; "
                            "use a supported vision transformer or leave drop_path unset")
    return adapter.set_drop_path(rate)


def _num_classes(model: nn.Module) -> int:
    """The classes mixup spreads its soft targets over: the classifier's, by the model's adapter."""
    adapter = find_adapter(model)
    if adapter is None:
        raise VitpruneError(f"mixup/cutmix need the number of classes, which a {type(model).__name__} does not "
                            "declare; use a supported vision transformer or turn them off")
    return adapter.num_classes


def _rng_state() -> dict[str, Any]:
    # Plain tensors and lists only, so the state loads with torch.load(weights_only=True).
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    if state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])
