"""``vitprune prune ...``: structural edits that make a model smaller, saved as base + recipe + weights."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.table import Table

from vitprune.cli.app import MODEL_HELP, app, console, err_console, print_json
from vitprune.cli.options import (
    CHECKPOINT_OPT, DATA_OPT, DATA_ROOT_OPT, DEVICE_OPT, DOWNLOAD_OPT, JSON_OPT, OVERWRITE_OPT, PRETRAINED_OPT,
    REPEATS_OPT, RESUME_OPT, SPEED_BATCH_OPT, SPEED_OPT, check_target, speed_config,
)
from vitprune.cli.config_options import config_options
from vitprune.cli.render import ratio, render_comparison
from vitprune.errors import VitpruneError
from vitprune.measure import SpeedConfig, format_count
from vitprune.methods.hiap import TRAIN_DEFAULTS as HIAP_TRAIN
from vitprune.methods.hiap import HiAPConfig
from vitprune.methods.depth import DepthConfig
from vitprune.methods.hetdpt.pipeline import HetDPTConfig, StageOverrides
from vitprune.methods.report import Report
from vitprune.methods.width.pipeline import WidthConfig
from vitprune.methods.star.pipeline import STARConfig
from vitprune.methods.vbp.pipeline import VBPConfig
from vitprune.training import TrainConfig

if TYPE_CHECKING:
    from vitprune.methods.depth import DepthReport
    from vitprune.methods.width import WidthReport

prune_app = typer.Typer(help="Prune a model and save it (base model + recipe of edits + weights).",
                        no_args_is_help=True)
app.add_typer(prune_app, name="prune")


SPLIT_OPT = typer.Option("auto", help="auto (the accuracy predictor decides) or A,G layers of each type.")
PRESET_OPT = typer.Option(None, help="HetDPT's settings: digits (minutes on a CPU) or imagenet (the reference "
                                     "scale); default by --data.")


def hetdpt_preset_for(preset: str | None, data: str) -> str:
    """HetDPT's preset: the one asked for, else ``digits`` for the digits data and ``imagenet`` for any other."""
    return preset or ("digits" if data == "digits" else "imagenet")


@prune_app.command()
@config_options(DepthConfig)
def depth(
    model: str = typer.Argument(..., help=MODEL_HELP),
    out: Path = typer.Option(..., "--out", help="Directory to save the pruned model to."),
    config: DepthConfig = ...,
    pretrained: bool = PRETRAINED_OPT,
    checkpoint: Optional[Path] = CHECKPOINT_OPT,
    speed: bool = SPEED_OPT,
    speed_batch: int = SPEED_BATCH_OPT,
    repeats: int = REPEATS_OPT,
    device: str = DEVICE_OPT,
    overwrite: bool = OVERWRITE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Remove attention sublayers and MLP activations (HetDPT/BoundaryDPT depth pruning); show before/after."""
    check_target(out, overwrite, "--out")
    config.validate()

    from vitprune.device import resolve_device
    from vitprune.methods.depth import run_depth
    from vitprune.models import resolve_model

    report = run_depth(resolve_model(model, pretrained=pretrained, checkpoint=checkpoint), config, out=out,
                       name=model, speed=speed_config(speed, speed_batch, repeats), device=resolve_device(device),
                       progress=not json_out)
    _show_edit(report, json_out, title=f"{model}: attention removed in blocks {report.attention or 'none'}, "
                                       f"activation in {report.activation or 'none'} (identity '{report.identity}')")


@prune_app.command()
@config_options(WidthConfig)
def width(
    model: str = typer.Argument(..., help=MODEL_HELP),
    out: Path = typer.Option(..., "--out", help="Directory to save the pruned model to."),
    config: WidthConfig = ...,
    data: Optional[str] = typer.Option(None, "--data", help="Data for taylor importance (digits, cifar10, ...)."),
    pretrained: bool = PRETRAINED_OPT,
    checkpoint: Optional[Path] = CHECKPOINT_OPT,
    data_root: Optional[Path] = DATA_ROOT_OPT,
    download: bool = DOWNLOAD_OPT,
    speed: bool = SPEED_OPT,
    speed_batch: int = SPEED_BATCH_OPT,
    repeats: int = REPEATS_OPT,
    device: str = DEVICE_OPT,
    overwrite: bool = OVERWRITE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Width pruning chosen by torch-pruning (Isomorphic Pruning: stream channels, head dims or heads, FFN neurons),
    cut by recorded edits; show before/after. Fine-tune the result with `vitprune finetune`."""
    check_target(out, overwrite, "--out")
    config.validate()

    from vitprune.device import resolve_device
    from vitprune.methods.width import run_width
    from vitprune.models import resolve_model

    if config.importance == "taylor" and data is None:
        raise VitpruneError("taylor importance needs --data")
    if data is not None:
        dense, sets = _load_inputs(model, data, pretrained=pretrained, checkpoint=checkpoint, data_root=data_root,
                                   download=download)
    else:
        dense, sets = resolve_model(model, pretrained=pretrained, checkpoint=checkpoint), {"train": None}
    report = run_width(dense, config, out=out, train_set=sets["train"], name=model,
                       speed=speed_config(speed, speed_batch, repeats), device=resolve_device(device),
                       progress=not json_out)
    _show_edit(report, json_out, title=f"{model}: width ratio {report.ratio:.4f} ({config.importance}, "
                                       f"{'isomorphic' if config.isomorphic else 'global'}, "
                                       f"{'heads' if config.heads else 'head dims'}"
                                       f"{', stream channels' if config.embed else ''})")


def _show_edit(report: DepthReport | WidthReport, json_out: bool, *, title: str) -> None:
    """Print what depth or width pruning did: as JSON, or as a before/after table under ``title`` with the speed."""
    if json_out:
        print_json(report.to_dict())
        return
    before, after = report.before, report.after
    table = Table("", "before", "after", "after / before", title=title)
    rows = [("params", "params"), ("MACs, full (with attention matmuls)", "macs_full"),
            ("MACs, linear-only (no attention matmuls)", "macs_linear")]
    for label, key in rows:
        table.add_row(label, format_count(before[key]), format_count(after[key]), ratio(after[key], before[key]))
    console.print(table)
    render_comparison("pruned", report.model, report.speed)
    if report.speed is not None:
        console.print(f"MAC ratio (full convention): {ratio(before['macs_full'], after['macs_full'])}×")
    console.print(f"saved to {report.out} (starting checkpoint: {report.model})")


@prune_app.command()
@config_options(HetDPTConfig, overrides=True)
@config_options(StageOverrides, param="stages", overrides=True)
def hetdpt(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: str = DATA_OPT,
    budget: int = typer.Option(..., "--budget", "-k", help="Layers to remove in all: attention sublayers + GELUs."),
    out: Path = typer.Option(..., "--out", help="Run directory: stage results, fine-tuning run, model/, report."),
    split: str = SPLIT_OPT,
    preset: Optional[str] = PRESET_OPT,
    stages: dict = ...,
    config: dict = ...,
    predictor: Optional[Path] = typer.Option(None, "--predictor", help="Reuse predictor.json from an earlier run."),
    resume: bool = RESUME_OPT,
    pretrained: bool = PRETRAINED_OPT,
    checkpoint: Optional[Path] = CHECKPOINT_OPT,
    data_root: Optional[Path] = DATA_ROOT_OPT,
    download: bool = DOWNLOAD_OPT,
    speed: bool = SPEED_OPT,
    speed_batch: int = SPEED_BATCH_OPT,
    repeats: int = REPEATS_OPT,
    device: str = DEVICE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """HetDPT: how many attention/GELU layers to remove (predictor), which (learned importance); fine-tune, merge."""
    from vitprune.cli.render import render_hetdpt
    from vitprune.device import resolve_device
    from vitprune.methods.hetdpt.pipeline import configure, parse_split, run_hetdpt

    chosen_split = parse_split(split)
    settings = configure(hetdpt_preset_for(preset, data), **stages, **config)
    dense, sets = _load_inputs(model, data, pretrained=pretrained, checkpoint=checkpoint, data_root=data_root,
                               download=download)
    report = run_hetdpt(dense, sets["train"], sets["val"], budget=budget, split=chosen_split, run_dir=out,
                        config=settings, device=resolve_device(device), progress=not json_out, resume=resume,
                        predictor=predictor, speed=speed_config(speed, speed_batch, repeats),
                        log=(lambda _m: None) if json_out else err_console.print)
    _show(model, report, render_hetdpt, json_out)


#: VBP's fine-tuning as the paper runs it: the defaults of --lr and --batch-size.
_VBP_FINETUNE = VBPConfig().finetune


@prune_app.command()
@config_options(VBPConfig)
def vbp(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: str = DATA_OPT,
    config: VBPConfig = ...,
    out: Path = typer.Option(..., "--out", help="Run directory: statistics, selection, fine-tuning, model/, report."),
    finetune_epochs: int = typer.Option(0, "--finetune-epochs", min=0, help="Fine-tuning epochs after pruning "
                                                                            "(paper: 10; 0: none)."),
    distill: bool = typer.Option(False, "--distill/--no-distill", help="Fine-tune with soft distillation from the "
                                                                       "unpruned model (the paper does)."),
    lr: float = typer.Option(_VBP_FINETUNE.lr, "--lr", help="Fine-tuning learning rate (paper: 1.5e-5, cosine, "
                                                            "AdamW)."),
    batch_size: int = typer.Option(_VBP_FINETUNE.batch_size, "--batch-size", "-b", min=1,
                                   help="Fine-tuning batch (paper: 32)."),
    resume: bool = RESUME_OPT,
    pretrained: bool = PRETRAINED_OPT,
    checkpoint: Optional[Path] = CHECKPOINT_OPT,
    data_root: Optional[Path] = DATA_ROOT_OPT,
    download: bool = DOWNLOAD_OPT,
    speed: bool = SPEED_OPT,
    speed_batch: int = SPEED_BATCH_OPT,
    repeats: int = REPEATS_OPT,
    device: str = DEVICE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """VBP: remove the MLP neurons of lowest activation variance network-wide, fold their means; fine-tune if asked."""
    from vitprune.cli.render import render_vbp
    from vitprune.methods.vbp.pipeline import run_vbp

    # The command line fine-tunes, and distils, only when asked (the API's defaults are the paper's run).
    finetune = (replace(_VBP_FINETUNE, epochs=finetune_epochs, lr=lr, batch_size=batch_size, seed=config.seed)
                if finetune_epochs else None)
    config = replace(config, finetune=finetune, distill="soft" if distill else "none")
    config.validate()
    _run_calibrated(run_vbp, render_vbp, config, model=model, data=data, out=out, pretrained=pretrained,
                    checkpoint=checkpoint, data_root=data_root, download=download, device=device, resume=resume,
                    speed=speed_config(speed, speed_batch, repeats), json_out=json_out)


#: STAR's fine-tuning as the paper runs it: the default of --lr.
_STAR_FINETUNE = STARConfig().finetune


@prune_app.command()
@config_options(STARConfig)
def star(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: str = DATA_OPT,
    out: Path = typer.Option(..., "--out",
                             help="Run directory: ACS, LRP prior, schedule, fine-tuning, model/, report."),
    config: STARConfig = ...,
    finetune_epochs: int = typer.Option(0, "--finetune-epochs", min=0,
                                        help="Fine-tuning epochs (paper: 120; 0: none)."),
    lr: float = typer.Option(_STAR_FINETUNE.lr, "--lr", help="Fine-tuning learning rate (paper: cosine 2e-5 -> "
                                                             "2e-9)."),
    # Smaller than the paper's 256, which needs several GPUs.
    batch_size: int = typer.Option(64, "--batch-size", "-b", min=1, help="Fine-tuning batch."),
    resume: bool = RESUME_OPT,
    pretrained: bool = PRETRAINED_OPT,
    checkpoint: Optional[Path] = CHECKPOINT_OPT,
    data_root: Optional[Path] = DATA_ROOT_OPT,
    download: bool = DOWNLOAD_OPT,
    speed: bool = SPEED_OPT,
    speed_batch: int = SPEED_BATCH_OPT,
    repeats: int = REPEATS_OPT,
    device: str = DEVICE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """STAR: drop patch tokens block by block, ranked by [CLS] attention fused with an LRP prior; ACS keep rates."""
    from vitprune.cli.render import render_star
    from vitprune.methods.star.pipeline import run_star

    # The command line fine-tunes only when asked; the cosine ends at lr·1e-4, as the paper's 2e-5 -> 2e-9.
    finetune = (TrainConfig(epochs=finetune_epochs, lr=lr, min_lr=lr * 1e-4, batch_size=batch_size, seed=config.seed)
                if finetune_epochs else None)
    config = replace(config, finetune=finetune)
    config.validate()
    _run_calibrated(run_star, render_star, config, model=model, data=data, out=out, pretrained=pretrained,
                    checkpoint=checkpoint, data_root=data_root, download=download, device=device, resume=resume,
                    speed=speed_config(speed, speed_batch, repeats), json_out=json_out)


@prune_app.command()
@config_options(HiAPConfig)
@config_options(TrainConfig, param="train", fields=("epochs", "lr", "batch_size", "seed"), defaults=HIAP_TRAIN)
def hiap(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: str = DATA_OPT,
    out: Path = typer.Option(..., "--out", help="Run directory: training run, gates, model/, plot, report."),
    config: HiAPConfig = ...,
    train: TrainConfig = ...,
    resume: bool = RESUME_OPT,
    pretrained: bool = PRETRAINED_OPT,
    checkpoint: Optional[Path] = CHECKPOINT_OPT,
    data_root: Optional[Path] = DATA_ROOT_OPT,
    download: bool = DOWNLOAD_OPT,
    speed: bool = SPEED_OPT,
    speed_batch: int = SPEED_BATCH_OPT,
    repeats: int = REPEATS_OPT,
    device: str = DEVICE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """HiAP: learn which heads, value dims, FFN blocks and neurons to keep under a MAC penalty; extract the model."""
    from vitprune.cli.render import render_hiap, render_hiap_epoch
    from vitprune.device import resolve_device
    from vitprune.methods.hiap import run_hiap

    config.validate()
    train.validate()
    dense, sets = _load_inputs(model, data, pretrained=pretrained, checkpoint=checkpoint, data_root=data_root,
                               download=download)
    report = run_hiap(dense, sets["train"], sets["val"], run_dir=out, train=train, config=config,
                      device=resolve_device(device), progress=not json_out, resume=resume,
                      speed=speed_config(speed, speed_batch, repeats),
                      log=(lambda _m: None) if json_out else err_console.print,
                      on_epoch=None if json_out else lambda stats: render_hiap_epoch(stats, config.target_macs))
    _show(model, report, render_hiap, json_out)


def _run_calibrated(run: Callable[..., Report], render: Callable[[str, Any], None], config: Any, *, model: str,
                    data: str, out: Path, pretrained: bool, checkpoint: Optional[Path], data_root: Optional[Path],
                    download: bool, device: str, resume: bool, speed: SpeedConfig, json_out: bool) -> None:
    """Load MODEL and --data (training images augmented for fine-tuning and plain for calibration), run a
    method's pipeline into --out and show its report."""
    from vitprune.device import resolve_device

    dense, sets = _load_inputs(model, data, pretrained=pretrained, checkpoint=checkpoint, data_root=data_root,
                               download=download, calibration=True)
    report = run(dense, sets["train"], sets["val"], calibration_set=sets["calibration"], run_dir=out, config=config,
                 device=resolve_device(device), progress=not json_out, resume=resume, speed=speed,
                 log=(lambda _m: None) if json_out else err_console.print)
    _show(model, report, render, json_out)


def _load_inputs(model: str, data: str, *, pretrained: bool, checkpoint: Optional[Path], data_root: Optional[Path],
                 download: bool, calibration: bool = False) -> tuple[Any, dict[str, Any]]:
    """MODEL, and --data's ``train`` (augmented) and ``val`` splits at its input size; with ``calibration``, also
    the training images with the evaluation transform."""
    from vitprune.adapters import get_adapter
    from vitprune.data import build_dataset
    from vitprune.models import resolve_model

    dense = resolve_model(model, pretrained=pretrained, checkpoint=checkpoint)
    adapter = get_adapter(dense)
    splits = [("train", "train", True), ("val", "val", False)] + ([("calibration", "train", False)] if calibration
                                                                   else [])
    sets = {name: build_dataset(data, split, input_size=adapter.input_size, root=data_root, download=download,
                                is_training=training, data_config=adapter.data_config)
            for name, split, training in splits}
    return dense, sets


def _show(model: str, report: Report, render: Callable[[str, Any], None], json_out: bool) -> None:
    """Print a pipeline's report, naming MODEL: as JSON (the report's keys, then ``model``), or through ``render``."""
    if json_out:
        print_json({**report.to_dict(), "model": model})
    else:
        render(model, report)
