"""``vitprune finetune``: recover accuracy after structural edits, optionally distilling from the original model."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from vitprune.cli.app import MODEL_HELP, app, console, err_console, print_json
from vitprune.cli.config_options import config_options
from vitprune.cli.options import (
    JSON_OPT, NUM_CLASSES_OPT, RESUME_OPT, Inputs, distributed, input_groups,
)
from vitprune.runs.render import percent
from vitprune.training import DistillConfig, TrainConfig


@app.command()
@input_groups
@config_options(TrainConfig, param="train")
@config_options(DistillConfig, param="distillation")
def finetune(
    model: str = typer.Argument(..., help=MODEL_HELP),
    inputs: Inputs = ...,
    out: Path = typer.Option(..., "--out", help="Run directory: checkpoint/, metrics.jsonl, and model/ when done."),
    train: TrainConfig = ...,
    distillation: DistillConfig = ...,
    teacher: Optional[str] = typer.Option(None, help="Teacher MODEL (default: the original MODEL was pruned from)."),
    resume: bool = RESUME_OPT,
    num_classes: Optional[int] = NUM_CLASSES_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Fine-tune MODEL on --data; runs unchanged under `torchrun --nproc_per_node N -m vitprune finetune ...`."""
    from vitprune.adapters import get_adapter
    from vitprune.atomic import check_writable
    from vitprune.data import dataset_classes
    from vitprune.errors import VitpruneError
    from vitprune.models import original_model, resolve_model
    from vitprune.recipe import RUN_MODEL_DIR, save
    from vitprune.training import finetune_pruned
    from vitprune.training.engine import logged_epochs

    train.validate()
    distillation.validate()
    check_writable(out, inside=True)  # before the data loads and an epoch trains
    distill = distillation.distill
    ctx = distributed(inputs.source.device)
    student, sets = inputs.load(model, {"train": ("train", True), "val": ("val", False)}, seed=train.seed,
                                num_classes=num_classes, new_head=True)
    data = inputs.data
    teacher_model = None
    if distill != "none":
        teacher_model = resolve_model(teacher) if teacher is not None else original_model(student)
        ours, theirs = get_adapter(student).num_classes, get_adapter(teacher_model).num_classes
        if theirs != ours:
            raise VitpruneError(f"the teacher predicts {theirs} classes, the model {ours}: pass --teacher a model of "
                                "these classes, or --distill none")
    finetune_pruned(student, sets["train"], sets["val"], train, teacher=teacher_model, distill=distill,
                    alpha=distillation.alpha, tau=distillation.tau, run_dir=out, dist=ctx, progress=not json_out,
                    resume=resume, console=err_console, on_epoch=None if json_out else _print_epoch)
    if not ctx.is_main:
        return
    # Every epoch of the run, those trained before a resume included.
    summary = {"model": model, "data": data.data, "classes": dataset_classes(sets["val"]), "run_dir": str(out),
               "epochs": logged_epochs(out), "distill": distill,
               "teacher": teacher or ("original" if distill != "none" else None)}
    save(student, out / RUN_MODEL_DIR, metadata={"finetune": summary})
    if json_out:
        print_json(summary)
        return
    console.print(f"saved the fine-tuned model to {out / RUN_MODEL_DIR} (starting checkpoint: {model})")


def _print_epoch(stats: dict) -> None:
    """One epoch's line, printed as the epoch ends (a log shows the run as it goes)."""
    val = f", val top-1 {percent(stats['val_top1'])}" if "val_top1" in stats else ""
    console.print(f"epoch {stats['epoch']}: train loss {stats['loss']:.4f}{val} ({stats['images_per_s']:.0f} img/s)")
