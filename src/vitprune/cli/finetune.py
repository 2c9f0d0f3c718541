"""``vitprune finetune``: recover accuracy after structural edits, optionally distilling from the original model."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from vitprune.cli.app import MODEL_HELP, app, console, err_console, print_json
from vitprune.cli.config_options import config_options
from vitprune.cli.options import (
    CHECKPOINT_OPT, DATA_OPT, DATA_ROOT_OPT, DEVICE_OPT, DOWNLOAD_OPT, JSON_OPT, PRETRAINED_OPT, RESUME_OPT,
    distributed,
)
from vitprune.cli.render import percent
from vitprune.training import DistillConfig, TrainConfig


@app.command()
@config_options(TrainConfig, param="train")
@config_options(DistillConfig, param="distillation")
def finetune(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: str = DATA_OPT,
    out: Path = typer.Option(..., "--out", help="Run directory: checkpoint/, metrics.jsonl, and model/ when done."),
    train: TrainConfig = ...,
    distillation: DistillConfig = ...,
    teacher: Optional[str] = typer.Option(None, help="Teacher MODEL (default: the original MODEL was pruned from)."),
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

    train.validate()
    distillation.validate()
    distill = distillation.distill
    ctx = distributed(device)
    student = resolve_model(model, pretrained=pretrained, checkpoint=checkpoint)
    adapter = get_adapter(student)
    train_set, val_set = (build_dataset(data, split, input_size=adapter.input_size, root=data_root, download=download,
                                        data_config=adapter.data_config) for split in ("train", "val"))
    teacher_model = None
    if distill != "none":
        teacher_model = resolve_model(teacher) if teacher is not None else original_model(student)
    history = finetune_pruned(student, train_set, val_set, train, teacher=teacher_model, distill=distill,
                              alpha=distillation.alpha, tau=distillation.tau, run_dir=out, dist=ctx,
                              progress=not json_out, resume=resume, console=err_console)
    if not ctx.is_main:
        return
    summary = {"model": model, "data": data, "run_dir": str(out), "epochs": history,
               "distill": distill, "teacher": teacher or ("original" if distill != "none" else None)}
    save(student, out / RUN_MODEL_DIR, metadata={"finetune": summary})
    if json_out:
        print_json(summary)
        return
    for stats in history:
        val = f", val top-1 {percent(stats['val_top1'])}" if "val_top1" in stats else ""
        console.print(f"epoch {stats['epoch']}: train loss {stats['loss']:.4f}{val} "
                      f"({stats['images_per_s']:.0f} img/s)")
    console.print(f"saved the fine-tuned model to {out / RUN_MODEL_DIR} (starting checkpoint: {model})")
