"""The ``vitprune prune`` commands of the methods whose presets and fine-tune defaults their configs do not hold yet
(HetDPT, VBP, STAR, HiAP); every other method's command is generated (:mod:`vitprune.cli.methods`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import typer

from vitprune.cli.app import MODEL_HELP, console, err_console
from vitprune.cli.config_options import config_options
from vitprune.cli.methods import prune_app
from vitprune.cli.options import JSON_OPT, RESUME_OPT, DataSource, ModelSource, distributed, load_inputs
from vitprune.cli.render import show_report
from vitprune.errors import VitpruneError
from vitprune.measure import SpeedConfig
from vitprune.methods.hetdpt.config import HetDPTConfig, StageOverrides
from vitprune.methods.hiap import TRAIN_DEFAULTS as HIAP_TRAIN
from vitprune.methods.hiap import HiAPConfig
from vitprune.methods.report import Report
from vitprune.methods.star.config import STARConfig
from vitprune.methods.vbp.config import VBPConfig
from vitprune.training import TrainConfig
from vitprune.training.presets import PRESETS, get_preset


SPLIT_OPT = typer.Option("auto", help="auto (the accuracy predictor decides) or A,G layers of each type.")
PRESET_OPT = typer.Option(None, help="HetDPT's settings: digits (minutes on a CPU) or imagenet-hetdpt (the paper's "
                                     "recipe at its code's scale, docs/recipes.md; alias imagenet); default by --data.")

#: A training preset (:mod:`vitprune.training.presets`); :func:`get_preset` refuses an unknown name in one line.
TRAIN_PRESET_OPT = typer.Option(None, "--preset", help=f"Train with a paper's recipe ({', '.join(PRESETS)}; "
                                                       "docs/recipes.md): its epochs, batch, schedule and "
                                                       "augmentation; the options here change it.")


def hetdpt_preset_for(preset: str | None, data: str) -> str:
    """HetDPT's preset: the one asked for, else ``digits`` for vitprune's own small datasets (digits, cluttered-mnist)
    and ``imagenet-hetdpt`` for any other."""
    return preset or ("digits" if data in ("digits", "cluttered-mnist") else "imagenet-hetdpt")


def _training(recipe: TrainConfig, *, epochs: int, batch_size: int | None, lr: float | None,
              seed: int | None, workers: int | None = None) -> TrainConfig:
    """``recipe`` for ``epochs`` at ``batch_size`` (``None``: its own), its lr scaled with the batch
    (:meth:`TrainConfig.at_batch`, ``lr = base_lr · batch / 512``) unless ``lr`` is given; ``seed`` and ``workers``
    ``None``: its own."""
    train = recipe.at_batch(batch_size) if batch_size is not None else recipe
    changes = {"epochs": epochs, "lr": lr, "seed": seed, "workers": workers}
    return replace(train, **{k: v for k, v in changes.items() if v is not None})


def _state_lr(train: TrainConfig | None, recipe: TrainConfig, json_out: bool) -> None:
    """Under the printed report, the peak lr the run trained at and how it follows from the recipe's (the JSON
    report's ``config`` holds it)."""
    if json_out or train is None:
        return
    how = ("the recipe's" if train.lr == recipe.lr and train.batch_size == recipe.batch_size
           else "scaled with the batch" if train.lr == recipe.at_batch(train.batch_size).lr else "given")
    console.print(f"trained at lr {train.lr:.3g} for a global batch of {train.batch_size} ({how}; the recipe: "
                  f"{recipe.lr:.3g} at {recipe.batch_size})")


@prune_app.command()
@config_options(ModelSource, param="source")
@config_options(DataSource, param="data", required=("data",))
@config_options(SpeedConfig, param="speed", prefix="speed_")
@config_options(HetDPTConfig, overrides=True)
@config_options(StageOverrides, param="stages", overrides=True)
def hetdpt(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: DataSource = ...,
    budget: int = typer.Option(..., "--budget", "-k", help="Layers to remove in all: attention sublayers + GELUs."),
    out: Path = typer.Option(..., "--out", help="Run directory: stage results, fine-tuning run, model/, report."),
    split: str = SPLIT_OPT,
    preset: Optional[str] = PRESET_OPT,
    stages: dict = ...,
    config: dict = ...,
    predictor: Optional[Path] = typer.Option(None, "--predictor", help="Reuse predictor.json from an earlier run."),
    resume: bool = RESUME_OPT,
    source: ModelSource = ...,
    speed: SpeedConfig = ...,
    json_out: bool = JSON_OPT,
) -> None:
    """HetDPT: how many attention/GELU layers to remove (predictor), which (learned importance); fine-tune, merge."""
    from vitprune.cli.render import render_hetdpt
    from vitprune.methods.hetdpt.pipeline import configure, parse_split, run_hetdpt

    chosen_split = parse_split(split)
    settings = configure(hetdpt_preset_for(preset, data.data), **stages, **config)
    ctx = distributed(source.device)
    dense, sets = load_inputs(model, source, data, seed=stages.get("seed") or 0,
                              splits=("train", "val", "calibration"))
    report = run_hetdpt(dense, sets["train"], sets["val"], budget=budget, split=chosen_split, run_dir=out,
                        config=settings, device=ctx.device, progress=not json_out and ctx.is_main, resume=resume,
                        dist=ctx,
                        predictor=predictor, speed=speed,
                        calibration_set=sets["calibration"], log=(lambda _m: None) if json_out else err_console.print)
    show_report(model, report, render_hetdpt, json_out)


#: VBP's fine-tuning as the paper runs it: the recipe without --preset.
_VBP_FINETUNE = VBPConfig().finetune


@prune_app.command()
@config_options(ModelSource, param="source")
@config_options(DataSource, param="data", required=("data",))
@config_options(SpeedConfig, param="speed", prefix="speed_")
@config_options(VBPConfig)
@config_options(TrainConfig, param="loading", fields=("workers",), overrides=True)
def vbp(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: DataSource = ...,
    config: VBPConfig = ...,
    loading: dict = ...,
    out: Path = typer.Option(..., "--out", help="Run directory: statistics, selection, fine-tuning, model/, report."),
    preset: Optional[str] = TRAIN_PRESET_OPT,
    finetune_epochs: Optional[int] = typer.Option(None, "--finetune-epochs", min=0, help="Fine-tuning epochs after "
                                                  "pruning (paper: 10; 0: none)  [default: the preset's, else 0]"),
    distill: Optional[bool] = typer.Option(None, "--distill/--no-distill", help="Fine-tune with soft distillation "
                                           "from the unpruned model (the paper does)  [default: on with --preset]"),
    lr: Optional[float] = typer.Option(None, "--lr", help="Fine-tuning peak learning rate  [default: the recipe's "
                                       f"(paper: {_VBP_FINETUNE.lr:g} at batch {_VBP_FINETUNE.batch_size}), scaled "
                                       "with --batch-size]"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", "-b", min=1, help="Fine-tuning global batch  "
                                             f"[default: the recipe's (paper: {_VBP_FINETUNE.batch_size})]"),
    resume: bool = RESUME_OPT,
    source: ModelSource = ...,
    speed: SpeedConfig = ...,
    json_out: bool = JSON_OPT,
) -> None:
    """VBP: remove the MLP neurons of lowest activation variance network-wide, fold their means; fine-tune if asked."""
    from vitprune.cli.render import render_vbp
    from vitprune.methods.vbp.pipeline import run_vbp

    # The command line fine-tunes, and distils, only when asked or given a preset (the API's defaults are the
    # paper's run).
    recipe = get_preset(preset).train if preset else _VBP_FINETUNE
    epochs = finetune_epochs if finetune_epochs is not None else recipe.epochs if preset else 0
    finetune = (_training(recipe, epochs=epochs, batch_size=batch_size, lr=lr, seed=config.seed,
                          workers=loading.get("workers")) if epochs else None)
    distill = distill if distill is not None else preset is not None
    config = replace(config, finetune=finetune, distill=VBPConfig.distill if distill else "none")
    config.validate()
    _run_calibrated(run_vbp, render_vbp, config, model=model, out=out, source=source, data=data, resume=resume,
                    speed=speed, json_out=json_out)
    _state_lr(finetune, recipe, json_out)


#: STAR's fine-tuning schedule without --preset: the paper's (STARConfig's), without DeiT's augmentation and EMA,
#: which need image data and GPUs, at a batch of 64 by default (the paper's 2048 needs several GPUs).
_STAR_PAPER = STARConfig().finetune
_STAR_FINETUNE = TrainConfig(epochs=_STAR_PAPER.epochs, lr=_STAR_PAPER.lr, min_lr=_STAR_PAPER.min_lr,
                             batch_size=_STAR_PAPER.batch_size)
_STAR_BATCH = 64


@prune_app.command()
@config_options(ModelSource, param="source")
@config_options(DataSource, param="data", required=("data",))
@config_options(SpeedConfig, param="speed", prefix="speed_")
@config_options(STARConfig)
@config_options(TrainConfig, param="loading", fields=("workers",), overrides=True)
def star(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: DataSource = ...,
    out: Path = typer.Option(..., "--out",
                             help="Run directory: ACS, LRP prior, schedule, fine-tuning, model/, report."),
    config: STARConfig = ...,
    loading: dict = ...,
    preset: Optional[str] = TRAIN_PRESET_OPT,
    finetune_epochs: Optional[int] = typer.Option(None, "--finetune-epochs", min=0, help="Fine-tuning epochs "
                                                  "(paper: 120; 0: none)  [default: the preset's, else 0]"),
    lr: Optional[float] = typer.Option(None, "--lr", help="Fine-tuning peak learning rate, cosine down to the "
                                       f"recipe's min lr  [default: the recipe's (paper: {_STAR_PAPER.lr:g} at batch "
                                       f"{_STAR_PAPER.batch_size}, to {_STAR_PAPER.min_lr:g}), scaled with "
                                       "--batch-size]"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", "-b", min=1, help="Fine-tuning global batch  "
                                             f"[default: the preset's, else {_STAR_BATCH}]"),
    resume: bool = RESUME_OPT,
    source: ModelSource = ...,
    speed: SpeedConfig = ...,
    json_out: bool = JSON_OPT,
) -> None:
    """STAR: drop patch tokens block by block, ranked by [CLS] attention fused with an LRP prior; ACS keep rates."""
    from vitprune.cli.render import render_star
    from vitprune.methods.star.pipeline import run_star

    # The command line fine-tunes only when asked or given a preset.
    recipe = get_preset(preset).train if preset else _STAR_FINETUNE
    epochs = finetune_epochs if finetune_epochs is not None else recipe.epochs if preset else 0
    batch = batch_size if batch_size is not None or preset else _STAR_BATCH
    finetune = (_training(recipe, epochs=epochs, batch_size=batch, lr=lr, seed=config.seed,
                          workers=loading.get("workers")) if epochs else None)
    config = replace(config, finetune=finetune)
    config.validate()
    _run_calibrated(run_star, render_star, config, model=model, out=out, source=source, data=data, resume=resume,
                    speed=speed, json_out=json_out)
    _state_lr(finetune, recipe, json_out)


@prune_app.command()
@config_options(ModelSource, param="source")
@config_options(DataSource, param="data", required=("data",))
@config_options(SpeedConfig, param="speed", prefix="speed_")
@config_options(HiAPConfig)
@config_options(TrainConfig, param="train", fields=("lr", "batch_size", "seed", "workers"), overrides=True)
def hiap(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: DataSource = ...,
    out: Path = typer.Option(..., "--out", help="Run directory: training run, gates, model/, plot, report."),
    config: HiAPConfig = ...,
    preset: Optional[str] = TRAIN_PRESET_OPT,
    epochs: Optional[int] = typer.Option(None, "--epochs", min=1, help="Training epochs (paper: 200)  [default: the "
                                                                       "preset's; required without one]"),
    train: dict = ...,
    resume: bool = RESUME_OPT,
    source: ModelSource = ...,
    speed: SpeedConfig = ...,
    json_out: bool = JSON_OPT,
) -> None:
    """HiAP: learn which heads, value dims, FFN blocks and neurons to keep under a MAC penalty; extract the model."""
    from vitprune.cli.render import render_hiap, render_hiap_epoch
    from vitprune.methods.hiap import run_hiap

    # Without --preset: HiAP's schedule (TRAIN_DEFAULTS, the paper's lr and batch without its augmentation).
    if preset is None and epochs is None:
        raise VitpruneError("give --epochs, or --preset for a paper's recipe (HiAP's: --preset imagenet-hiap)")
    recipe = get_preset(preset).train if preset else TrainConfig(epochs=epochs, **HIAP_TRAIN)
    training = _training(recipe, epochs=epochs or recipe.epochs,
                         **{k: train.get(k) for k in ("batch_size", "lr", "seed", "workers")})
    config.validate()
    training.validate()
    ctx = distributed(source.device)
    dense, sets = load_inputs(model, source, data, seed=training.seed)
    report = run_hiap(dense, sets["train"], sets["val"], run_dir=out, train=training, config=config,
                      device=ctx.device, progress=not json_out and ctx.is_main, resume=resume, dist=ctx,
                      speed=speed,
                      log=(lambda _m: None) if json_out else err_console.print,
                      on_epoch=None if json_out else lambda stats: render_hiap_epoch(stats, config.target_macs))
    show_report(model, report, render_hiap, json_out)
    _state_lr(training, recipe, json_out)


def _run_calibrated(run: Callable[..., Report], render: Callable[[str, Any], None], config: Any, *, model: str,
                    out: Path, source: ModelSource, data: DataSource, resume: bool, speed: SpeedConfig,
                    json_out: bool) -> None:
    """Load MODEL and --data (training images augmented for fine-tuning and plain for calibration), run a
    method's pipeline into --out and show its report."""
    ctx = distributed(source.device)
    dense, sets = load_inputs(model, source, data, seed=config.seed, splits=("train", "val", "calibration"))
    report = run(dense, sets["train"], sets["val"], calibration_set=sets["calibration"], run_dir=out, config=config,
                 device=ctx.device, progress=not json_out and ctx.is_main, resume=resume, speed=speed, dist=ctx,
                 log=(lambda _m: None) if json_out else err_console.print)
    show_report(model, report, render, json_out)
