"""``vitprune prune ...``: structural edits that make a model smaller, saved as base + recipe + weights."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.table import Table

from vitprune.cli.app import MODEL_HELP, app, console, err_console, print_json
from vitprune.cli.options import (
    CHECKPOINT_OPT, DATA_OPT, DATA_ROOT_OPT, DEVICE_OPT, DOWNLOAD_OPT, IDENTITY_OPT, JSON_OPT, OVERWRITE_OPT,
    PRETRAINED_OPT, REPEATS_OPT, RESUME_OPT, SPEED_BATCH_OPT, SPEED_OPT, AttentionIdentity, Convention, Distill,
    check_target, speed_config,
)
from vitprune.cli.config_options import config_options
from vitprune.cli.render import ratio, render_comparison
from vitprune.errors import VitpruneError
from vitprune.measure import SpeedConfig, format_count
from vitprune.methods.hiap import TRAIN_DEFAULTS as HIAP_TRAIN
from vitprune.methods.hiap import HiAPConfig
from vitprune.methods.report import Report
from vitprune.methods.star.pipeline import STARConfig
from vitprune.methods.vbp.pipeline import VBPConfig
from vitprune.training import TrainConfig

if TYPE_CHECKING:
    from vitprune.methods.depth import DepthReport
    from vitprune.methods.width import WidthReport

prune_app = typer.Typer(help="Prune a model and save it (base model + recipe of edits + weights).",
                        no_args_is_help=True)
app.add_typer(prune_app, name="prune")


def hetdpt_preset_for(preset: str | None, data: str) -> str:
    """HetDPT's preset: the one asked for, else ``digits`` for the digits data and ``imagenet`` for any other."""
    return preset or ("digits" if data == "digits" else "imagenet")


def parse_indices(text: str, what: str) -> list[int]:
    """``"0,3,7"`` -> ``[0, 3, 7]``; an empty string is no index."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise VitpruneError(f"--{what} takes comma-separated block indices such as 0,3,7; got {text!r}") from None


@prune_app.command()
def depth(
    model: str = typer.Argument(..., help=MODEL_HELP),
    out: Path = typer.Option(..., "--out", help="Directory to save the pruned model to."),
    attention: str = typer.Option("", "--attention", help="Blocks whose attention sublayer goes, e.g. 0,3,7,8,11."),
    activation: str = typer.Option("", "--activation", help="Blocks whose MLP activation goes (fc1 and fc2 merge)."),
    identity: AttentionIdentity = IDENTITY_OPT,
    fold_norm: bool = typer.Option(False, "--fold-norm", help="Fold each merged block's LN2 affine into its Linear."),
    output_gelu: bool = typer.Option(
        False, "--output-gelu", help="Compatibility: GELU after blocks that lost both layers, as HetDPT's code does."),
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

    from vitprune.device import resolve_device
    from vitprune.methods.depth import run_depth
    from vitprune.models import resolve_model

    attn_idx, act_idx = parse_indices(attention, "attention"), parse_indices(activation, "activation")
    if not attn_idx and not act_idx:
        raise VitpruneError("nothing to prune: give --attention and/or --activation block indices")
    report = run_depth(resolve_model(model, pretrained=pretrained, checkpoint=checkpoint), attn_idx, act_idx, out=out,
                       name=model, identity=identity.value, fold_norm=fold_norm, output_gelu=output_gelu,
                       speed=speed_config(speed, speed_batch, repeats), device=resolve_device(device),
                       progress=not json_out)
    _show_edit(report, json_out, title=f"{model}: attention removed in blocks {report.attention or 'none'}, "
                                       f"activation in {report.activation or 'none'} (identity '{report.identity}')")


class Importance(str, Enum):
    magnitude = "magnitude"
    taylor = "taylor"


@prune_app.command()
def width(
    model: str = typer.Argument(..., help=MODEL_HELP),
    out: Path = typer.Option(..., "--out", help="Directory to save the pruned model to."),
    ratio: Optional[float] = typer.Option(None, "--ratio", "-p", help="torch-pruning's channel ratio, e.g. 0.5."),
    macs: Optional[float] = typer.Option(None, "--macs", help="Target GMACs per image instead of a ratio."),
    convention: Convention = typer.Option(Convention.full, help="MAC convention of --macs: full (with attention "
                                                                 "matmuls) or linear (Linear/Conv only)."),
    importance: Importance = typer.Option(Importance.magnitude, help="magnitude (data-free) or taylor (needs "
                                                                      "--data)."),
    heads: bool = typer.Option(False, "--heads/--head-dims", help="Remove whole heads instead of head dimensions."),
    embed: bool = typer.Option(True, "--embed/--no-embed", help="Also prune the residual stream's channels."),
    isomorphic: bool = typer.Option(True, "--isomorphic/--global", help="Rank within groups of the same shape "
                                                                         "(Isomorphic Pruning) or all together."),
    round_to: Optional[int] = typer.Option(None, "--round-to", min=1, help="Keep every width a multiple of N "
                                                                           "(8: faster kernels)."),
    data: Optional[str] = typer.Option(None, "--data", help="Data for taylor importance (digits, cifar10, ...)."),
    batches: int = typer.Option(4, "--batches", min=1, help="Training batches of 16 for taylor importance."),
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

    from vitprune.device import resolve_device
    from vitprune.methods.width import run_width
    from vitprune.models import resolve_model

    if (ratio is None) == (macs is None):
        raise VitpruneError("give exactly one of --ratio and --macs")
    if importance is Importance.taylor and data is None:
        raise VitpruneError("taylor importance needs --data")
    if data is not None:
        dense, sets = _load_inputs(model, data, pretrained=pretrained, checkpoint=checkpoint, data_root=data_root,
                                   download=download)
    else:
        dense, sets = resolve_model(model, pretrained=pretrained, checkpoint=checkpoint), {"train": None}
    report = run_width(dense, out=out, ratio=ratio, target_macs=None if macs is None else macs * 1e9,
                       convention=convention.value, importance=importance.value, heads=heads, embed=embed,
                       isomorphic=isomorphic, round_to=round_to, train_set=sets["train"], batches=batches, name=model,
                       speed=speed_config(speed, speed_batch, repeats), device=resolve_device(device),
                       progress=not json_out)
    _show_edit(report, json_out, title=f"{model}: width ratio {report.ratio:.4f} ({importance.value}, "
                                       f"{'isomorphic' if isomorphic else 'global'}, "
                                       f"{'heads' if heads else 'head dims'}{', stream channels' if embed else ''})")


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
def hetdpt(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: str = DATA_OPT,
    budget: int = typer.Option(..., "--budget", "-k", help="Layers to remove in all: attention sublayers + GELUs."),
    out: Path = typer.Option(..., "--out", help="Run directory: stage results, fine-tuning run, model/, report."),
    split: str = typer.Option("auto", help="auto (the accuracy predictor decides) or A,G layers of each type."),
    preset: Optional[str] = typer.Option(
        None, help="Settings: digits (minutes on a CPU) or imagenet (the reference scale); default by --data."),
    epochs: Optional[int] = typer.Option(None, "--epochs", min=1, help="Stage-2 fine-tuning epochs."),
    search_epochs: Optional[int] = typer.Option(None, "--search-epochs", min=1, help="Step-2 importance epochs."),
    probe_epochs: Optional[int] = typer.Option(None, "--probe-epochs", min=1,
                                               help="Fast fine-tune epochs per predictor point."),
    lr: Optional[float] = typer.Option(None, "--lr", help="Stage-2 peak learning rate."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", "-b", min=1, help="Batch for every stage."),
    distill: Optional[Distill] = typer.Option(None, help="Self-distillation from the unpruned model (preset's "
                                                         "default)."),
    identity: AttentionIdentity = IDENTITY_OPT,
    output_gelu: bool = typer.Option(False, "--output-gelu", help="Compatibility: the reference code's extra GELU."),
    shortlist: Optional[int] = typer.Option(None, min=1, help="Step 2 chooses among each type's N lowest-TE layers."),
    min_per_type: int = typer.Option(0, "--min-per-type", min=0, help="Predictor search: remove at least this many "
                                                                          "of each type."),
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
    config = configure(hetdpt_preset_for(preset, data), epochs=epochs,
                       search_epochs=search_epochs, probe_epochs=probe_epochs, lr=lr, batch_size=batch_size,
                       distill=distill.value if distill is not None else None, identity=identity.value,
                       output_gelu=output_gelu, shortlist=shortlist,
                       min_per_type=min_per_type)
    dense, sets = _load_inputs(model, data, pretrained=pretrained, checkpoint=checkpoint, data_root=data_root,
                               download=download)
    report = run_hetdpt(dense, sets["train"], sets["val"], budget=budget, split=chosen_split, run_dir=out,
                        config=config, device=resolve_device(device), progress=not json_out, resume=resume,
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
