"""The fine-tuning engine every method uses to recover accuracy after structural edits.

One :class:`Trainer` runs epochs of optimisation steps with AMP (on CUDA), gradient accumulation,
clipping, optional EMA and a per-step warm-up + cosine schedule (timm's optimizer and scheduler
factories), and DeiT's regularisation where its config asks: mixup/cutmix, label smoothing,
RandAugment and random erasing (the training set's transform, :func:`vitprune.data.augmented`),
stochastic depth and repeated augmentation. Methods plug in through :class:`TrainHooks` (extra
loss terms, their own schedules, parameter groups with their own learning rates). Runs checkpoint
atomically into a run directory and resume exactly where they stopped, mid-epoch (the epoch's running
loss and accuracy with it) or in validation included, so that the weights and every line of
metrics.jsonl but its wall times are an uninterrupted run's. Ctrl-C saves and exits cleanly, and a
non-finite loss stops the run, keeping the last good checkpoint. Every image is augmented under a
seed of its own (its place in the epoch's order), so the result does not depend on the number of
data-loading workers, and a resumed run draws what it would have.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
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
from vitprune.data import augmented
from vitprune.errors import VitpruneError
from vitprune.recipe import WEIGHTS_FILE, get_recipe, read_document, save
from vitprune.training.config import TrainConfig
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

#: ``criterion(images, outputs, targets) -> loss``; images are passed so a distillation loss can run its teacher.
Criterion = Callable[[torch.Tensor, Any, torch.Tensor], torch.Tensor]


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
        return self.ce(class_logits(outputs), targets)


def class_logits(outputs: Any) -> torch.Tensor:
    """The class head's logits of what a model returned in training mode: a distilled DeiT returns (class-head,
    distillation-head) logits."""
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
        # The epoch so far (summed loss, top-1 hits, images, seconds), which a resumed epoch continues, and the same at
        # the last step boundary, where an interrupt rolls back to; under torchrun each process's own.
        self._tally = self._step_tally = _NO_TALLY
        # An epoch whose training ended but whose validation and line in the log have not: a resumed run finishes it.
        self._ended: dict[str, float] | None = None
        self._started = False

    # -- the loop -------------------------------------------------------------------------------

    def fit(self, *, resume: bool = False,
            on_batch: Callable[[Trainer, float, float], None] | None = None) -> list[dict]:
        """Run to the last epoch; returns one stats dict per epoch ended in this call (:func:`logged_epochs` reads
        the run's every epoch).

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
            while self.epoch < self.config.epochs or self._ended is not None:
                if self._ended is None:
                    self._ended = self._run_epoch(on_batch)
                    self.epoch, self.batch = self.epoch + 1, 0
                stats = {**self._ended, **self._validate()}
                self.hooks.on_epoch_end(self, stats)
                history.append(stats)
                self._log(stats)
                self._ended = None
                self.save_checkpoint()
        except KeyboardInterrupt:
            # Partial accumulation is dropped: resuming is exact when the interrupt falls on a step boundary.
            if self.batch % self.config.accum_steps:
                self.batch -= self.batch % self.config.accum_steps
                self._tally = self._step_tally
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
            seed_all(self.config.seed)
        self._started = True

    def _run_epoch(self, on_batch: Callable[[Trainer, float, float], None] | None) -> dict[str, float]:
        cfg, start = self.config, time.perf_counter()
        self.sampler.set_epoch(self.epoch, start=self.batch * self.local_batch)
        loss_sum, correct, count, before = self._tally
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
            loss_sum, correct, count = loss_sum + loss * len(targets), correct + batch_correct, count + len(targets)
            self.batch += 1
            self._tally = (loss_sum, correct, count, before + time.perf_counter() - start)
            if self.batch % cfg.accum_steps == 0:
                self._step_tally = self._tally
            last_of_step = self.batch % cfg.accum_steps == 0 or self.batch == self.batches_per_epoch
            if last_of_step:
                self._optimizer_step()
            if on_batch is not None:
                on_batch(self, loss_sum / count, correct / count)
            self._boundary_rng = _rng_state()
            if last_of_step and cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0 \
                    and self.batch < self.batches_per_epoch:
                self.save_checkpoint()
        # A resumed epoch's time is the interrupted calls' up to their last batch plus this call's, and its speed all
        # its images over that time: images_per_s * seconds is the epoch's images, however many calls ran it.
        seconds = before + time.perf_counter() - start
        self._tally = self._step_tally = _NO_TALLY
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
        correct = int((class_logits(outputs).argmax(dim=1) == labels).sum())
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
        """Write model (recipe format), optimizer, scheduler, scaler, EMA, RNG, position and the epoch's running sums,
        atomically."""
        if self.run_dir is None:
            return
        # Each process's sums, one row per rank, so that each resumes its own: summed into one they would reach the
        # epoch's totals by another order of additions than an uninterrupted run, and differ from it by rounding.
        tallies = torch.zeros(self.dist.world_size, len(_NO_TALLY), dtype=torch.float64)
        tallies[self.dist.rank] = torch.tensor(self._tally, dtype=torch.float64)
        tallies = all_reduce_sum(tallies)
        if self.dist.is_main:
            self._write_checkpoint(tallies)
        if self.dist.world_size > 1:
            torch.distributed.barrier()  # nobody reads or overwrites it before it is complete

    def _write_checkpoint(self, tallies: torch.Tensor) -> None:
        with atomic_directory(self.run_dir / CHECKPOINT_DIR) as tmp:
            save(self.model, tmp / MODEL_DIR)
            # After an epoch's training, not its validation (which a resumed run repeats), the generators' state is the
            # one at its last batch too.
            boundary = self.batch or self._ended is not None
            state = {
                "config": asdict(self.config), "epoch": self.epoch, "batch": self.batch, "step": self.step,
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(), "rng": self._boundary_rng if boundary else _rng_state(),
                "hooks": self.hooks.state_dict(), "tally": tallies, "ended": self._ended,
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
        tallies = state["tally"]
        # Mid-epoch, each process continues its own share of the epoch, which another number of them would not have.
        if state["batch"] and len(tallies) != self.dist.world_size:
            raise VitpruneError(f"cannot resume {self.run_dir} mid-epoch on {self.dist.world_size} process(es): its "
                                f"checkpoint was written by {len(tallies)}; resume it on {len(tallies)}")
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
        self.epoch, self.batch, self.step, self._ended = state["epoch"], state["batch"], state["step"], state["ended"]
        loss_sum, correct, count, seconds = tallies[self.dist.rank].tolist() if self.batch else _NO_TALLY
        self._tally = self._step_tally = (loss_sum, int(correct), int(count), seconds)
        _set_rng_state(state["rng"])

    def _log(self, stats: dict[str, float]) -> None:
        if self.run_dir is None or not self.dist.is_main:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with (self.run_dir / METRICS_FILE).open("a") as f:
            f.write(json.dumps(stats) + "\n")


def logged_epochs(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every epoch's statistics in ``run_dir``'s metrics.jsonl, those of interrupted earlier calls included
    (:meth:`Trainer.fit` returns its own call's); none where there is no log."""
    path = Path(run_dir) / METRICS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


#: An epoch's running sums before its first batch: loss, top-1 hits, images, seconds.
_NO_TALLY = (0.0, 0, 0, 0.0)


def seed_all(seed: int) -> None:
    """Seed the global random number generators a run draws from (torch's, Python's, NumPy's): augmentation in the
    main process, dropout, initialisation."""
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
