"""``vitprune finetune``: recover accuracy after structural edits, optionally distilling from the original model."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from vitprune.cli.app import MODEL_HELP, app, console, err_console, print_json
from vitprune.cli.options import (
    CHECKPOINT_OPT, DATA_OPT, DATA_ROOT_OPT, DEVICE_OPT, DOWNLOAD_OPT, JSON_OPT, PRETRAINED_OPT, RESUME_OPT, Distill,
)
from vitprune.cli.render import percent
from vitprune.device import AUTO
from vitprune.training import FINETUNE_DISTILL, TrainConfig


class Optim(str, Enum):
    adamw = "adamw"
    sgd = "sgd"


@app.command()
def finetune(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: str = DATA_OPT,
    out: Path = typer.Option(..., "--out", help="Run directory: checkpoint/, metrics.jsonl, and model/ when done."),
    epochs: int = typer.Option(..., min=1),
    lr: float = typer.Option(TrainConfig.lr, help="Peak learning rate (after warm-up)."),
    batch_size: int = typer.Option(TrainConfig.batch_size, "--batch-size", "-b", min=1,
                                   help="Global batch (split over processes)."),
    optimizer: Optim = typer.Option(Optim(TrainConfig.optimizer)),
    weight_decay: float = typer.Option(TrainConfig.weight_decay, "--weight-decay"),
    warmup_epochs: float = typer.Option(TrainConfig.warmup_epochs, "--warmup-epochs"),
    label_smoothing: float = typer.Option(TrainConfig.label_smoothing, "--label-smoothing"),
    mixup: float = typer.Option(TrainConfig.mixup_alpha, "--mixup", min=0.0, help="timm mixup alpha (0: off)."),
    cutmix: float = typer.Option(TrainConfig.cutmix_alpha, "--cutmix", min=0.0, help="timm cutmix alpha (0: off)."),
    clip_grad: Optional[float] = typer.Option(TrainConfig.clip_grad, "--clip-grad", help="Max gradient norm."),
    accum_steps: int = typer.Option(TrainConfig.accum_steps, "--accum-steps", min=1,
                                    help="Micro-batches per optimisation step."),
    ema_decay: Optional[float] = typer.Option(TrainConfig.ema_decay, "--ema-decay", help="Keep an EMA of the weights."),
    amp: bool = typer.Option(TrainConfig.amp, "--amp/--no-amp", help="Mixed precision on CUDA (ignored on CPU)."),
    distill: Distill = typer.Option(Distill(FINETUNE_DISTILL["distill"]),
                                    help="Distillation from the teacher: soft (KL) or hard (DeiT)."),
    teacher: Optional[str] = typer.Option(None, help="Teacher MODEL (default: the original MODEL was pruned from)."),
    alpha: float = typer.Option(FINETUNE_DISTILL["alpha"], help="Weight of the distillation term."),
    tau: float = typer.Option(FINETUNE_DISTILL["tau"], help="Temperature of soft distillation."),
    seed: int = typer.Option(TrainConfig.seed),
    checkpoint_every: int = typer.Option(TrainConfig.checkpoint_every, "--checkpoint-every", min=0,
                                         help="Steps between checkpoints (0: epochs)."),
    resume: bool = RESUME_OPT,
    pretrained: bool = PRETRAINED_OPT,
    checkpoint: Optional[Path] = CHECKPOINT_OPT,
    data_root: Optional[Path] = DATA_ROOT_OPT,
    download: bool = DOWNLOAD_OPT,
    device: str = DEVICE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Fine-tune MODEL on --data; runs unchanged under `torchrun --nproc_per_node N -m vitprune finetune ...`."""
    from vitprune.adapters import get_adapter
    from vitprune.data import build_dataset
    from vitprune.models import original_model, resolve_model
    from vitprune.recipe import RUN_MODEL_DIR, save
    from vitprune.training import finetune_pruned
    from vitprune.training.distributed import init_distributed

    ctx = init_distributed(None if device == AUTO else device)
    student = resolve_model(model, pretrained=pretrained, checkpoint=checkpoint)
    adapter = get_adapter(student)
    train_set, val_set = (build_dataset(data, split, input_size=adapter.input_size, root=data_root, download=download,
                                        data_config=adapter.data_config) for split in ("train", "val"))
    teacher_model = None
    if distill is not Distill.none:
        teacher_model = resolve_model(teacher) if teacher is not None else original_model(student)
    config = TrainConfig(epochs=epochs, lr=lr, batch_size=batch_size, optimizer=optimizer.value,
                         weight_decay=weight_decay, warmup_epochs=warmup_epochs, label_smoothing=label_smoothing,
                         mixup_alpha=mixup, cutmix_alpha=cutmix,
                         clip_grad=clip_grad, accum_steps=accum_steps, amp=amp, ema_decay=ema_decay, seed=seed,
                         checkpoint_every=checkpoint_every)
    history = finetune_pruned(student, train_set, val_set, config, teacher=teacher_model, distill=distill.value,
                              alpha=alpha, tau=tau, run_dir=out, dist=ctx, progress=not json_out, resume=resume,
                              console=err_console)
    if not ctx.is_main:
        return
    summary = {"model": model, "data": data, "run_dir": str(out), "epochs": history,
               "distill": distill.value, "teacher": teacher or ("original" if distill is not Distill.none else None)}
    save(student, out / RUN_MODEL_DIR, metadata={"finetune": summary})
    if json_out:
        print_json(summary)
        return
    for stats in history:
        val = f", val top-1 {percent(stats['val_top1'])}" if "val_top1" in stats else ""
        console.print(f"epoch {stats['epoch']}: train loss {stats['loss']:.4f}{val} "
                      f"({stats['images_per_s']:.0f} img/s)")
    console.print(f"saved the fine-tuned model to {out / RUN_MODEL_DIR} (starting checkpoint: {model})")
