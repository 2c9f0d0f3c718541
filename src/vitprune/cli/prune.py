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
from vitprune.cli.options import (
    DataSource, FinetuneOptions, ModelSource, RunOutput, distributed, finetune_groups, load_inputs, run_groups,
)
from vitprune.cli.render import show_report
from vitprune.errors import VitpruneError
from vitprune.measure import SpeedConfig
from vitprune.methods.hetdpt.config import HetDPTBudget, HetDPTConfig, StageOverrides
from vitprune.methods.hiap import TRAIN_DEFAULTS as HIAP_TRAIN
from vitprune.methods.hiap import HiAPConfig
from vitprune.methods.report import Report
from vitprune.methods.star.config import STARConfig
from vitprune.methods.vbp.config import VBPConfig
from vitprune.training import TrainConfig
from vitprune.training.presets import get_preset


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
@run_groups
@config_options(HetDPTBudget, param="choice")
@config_options(HetDPTConfig, overrides=True)
@config_options(StageOverrides, param="stages", overrides=True)
def hetdpt(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: DataSource = ...,
    choice: HetDPTBudget = ...,
    out: Path = typer.Option(..., "--out", help="Run directory: stage results, fine-tuning run, model/, report."),
    stages: dict = ...,
    config: dict = ...,
    source: ModelSource = ...,
    speed: SpeedConfig = ...,
    output: RunOutput = ...,
) -> None:
    """HetDPT: how many attention/GELU layers to remove (predictor), which (learned importance); fine-tune, merge."""
    from vitprune.cli.render import render_hetdpt
    from vitprune.methods.hetdpt.pipeline import configure, parse_split, run_hetdpt

    chosen_split = parse_split(choice.split)
    settings = configure(hetdpt_preset_for(choice.preset, data.data), **stages, **config)
    ctx = distributed(source.device)
    dense, sets = load_inputs(model, source, data, seed=stages.get("seed") or 0,
                              splits=("train", "val", "calibration"))
    report = run_hetdpt(dense, sets["train"], sets["val"], budget=choice.budget, split=chosen_split, run_dir=out,
                        config=settings, device=ctx.device, progress=not output.json and ctx.is_main,
                        resume=output.resume, dist=ctx, predictor=choice.predictor, speed=speed,
                        calibration_set=sets["calibration"],
                        log=(lambda _m: None) if output.json else err_console.print)
    show_report(model, report, render_hetdpt, output.json)


#: VBP's fine-tuning as the paper runs it: the recipe without --preset.
_VBP_FINETUNE = VBPConfig().finetune

def _finetune(options: FinetuneOptions, paper: TrainConfig, *, seed: int,
              batch: int | None = None) -> tuple[TrainConfig | None, TrainConfig]:
    """The fine-tune that the fine-tune group's ``options`` ask for, and its recipe: --preset's, else ``paper`` (at
    ``batch`` where given); none without --epochs or --preset."""
    preset = options.preset
    recipe = get_preset(preset).train if preset else paper
    epochs = options.epochs if options.epochs is not None else recipe.epochs if preset else 0
    batch = options.batch_size or (None if preset else batch)
    if not epochs:
        return None, recipe
    return _training(recipe, epochs=epochs, batch_size=batch, lr=options.lr, seed=seed,
                     workers=options.workers), recipe


@prune_app.command()
@finetune_groups
@config_options(VBPConfig)
def vbp(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: DataSource = ...,
    config: VBPConfig = ...,
    out: Path = typer.Option(..., "--out", help="Run directory: statistics, selection, fine-tuning, model/, report."),
    finetune: FinetuneOptions = ...,
    distill: Optional[bool] = typer.Option(None, "--distill/--no-distill", help="Fine-tune with soft distillation "
                                           "from the unpruned model (the paper does)  [default: on with --preset]"),
    source: ModelSource = ...,
    speed: SpeedConfig = ...,
    output: RunOutput = ...,
) -> None:
    """VBP: remove the MLP neurons of lowest activation variance network-wide, fold their means; fine-tune if asked
    (the paper: 10 epochs of its recipe, --preset imagenet-vbp)."""
    from vitprune.cli.render import render_vbp
    from vitprune.methods.vbp.pipeline import run_vbp

    # The command line fine-tunes, and distils, only when asked or given a preset (the API's defaults are the
    # paper's run).
    train, recipe = _finetune(finetune, _VBP_FINETUNE, seed=config.seed)
    distill = distill if distill is not None else finetune.preset is not None
    config = replace(config, finetune=train, distill=VBPConfig.distill if distill else "none")
    config.validate()
    _run_calibrated(run_vbp, render_vbp, config, model=model, out=out, source=source, data=data, speed=speed,
                    output=output)
    _state_lr(train, recipe, output.json)


#: STAR's fine-tuning schedule without --preset: the paper's (STARConfig's), without DeiT's augmentation and EMA,
#: which need image data and GPUs, at a batch of 64 by default (the paper's 2048 needs several GPUs).
_STAR_PAPER = STARConfig().finetune
_STAR_FINETUNE = TrainConfig(epochs=_STAR_PAPER.epochs, lr=_STAR_PAPER.lr, min_lr=_STAR_PAPER.min_lr,
                             batch_size=_STAR_PAPER.batch_size)
_STAR_BATCH = 64


@prune_app.command()
@finetune_groups
@config_options(STARConfig)
def star(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: DataSource = ...,
    out: Path = typer.Option(..., "--out",
                             help="Run directory: ACS, LRP prior, schedule, fine-tuning, model/, report."),
    config: STARConfig = ...,
    finetune: FinetuneOptions = ...,
    source: ModelSource = ...,
    speed: SpeedConfig = ...,
    output: RunOutput = ...,
) -> None:
    """STAR: drop patch tokens block by block, ranked by [CLS] attention fused with an LRP prior; ACS keep rates
    (the paper fine-tunes 120 epochs: --preset imagenet-star; without a preset at a batch of 64)."""
    from vitprune.cli.render import render_star
    from vitprune.methods.star.pipeline import run_star

    # The command line fine-tunes only when asked or given a preset.
    train, recipe = _finetune(finetune, _STAR_FINETUNE, seed=config.seed, batch=_STAR_BATCH)
    config = replace(config, finetune=train)
    config.validate()
    _run_calibrated(run_star, render_star, config, model=model, out=out, source=source, data=data, speed=speed,
                    output=output)
    _state_lr(train, recipe, output.json)


@prune_app.command()
@finetune_groups
@config_options(HiAPConfig)
def hiap(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: DataSource = ...,
    out: Path = typer.Option(..., "--out", help="Run directory: training run, gates, model/, plot, report."),
    config: HiAPConfig = ...,
    finetune: FinetuneOptions = ...,
    seed: int = typer.Option(0, "--seed", help="Seed of the training (data order, augmentation, gates' noise) and of "
                                               "a --no-pretrained model's weights."),
    source: ModelSource = ...,
    speed: SpeedConfig = ...,
    output: RunOutput = ...,
) -> None:
    """HiAP: learn which heads, value dims, FFN blocks and neurons to keep under a MAC penalty; extract the model
    (the paper trains 200 epochs: --preset imagenet-hiap)."""
    from vitprune.cli.render import render_hiap, render_hiap_epoch
    from vitprune.methods.hiap import run_hiap

    # Without --preset: HiAP's schedule (TRAIN_DEFAULTS, the paper's lr and batch without its augmentation).
    if finetune.preset is None and finetune.epochs is None:
        raise VitpruneError("give --epochs, or --preset for a paper's recipe (HiAP's: --preset imagenet-hiap)")
    training, recipe = _finetune(finetune, TrainConfig(epochs=finetune.epochs or 1, **HIAP_TRAIN), seed=seed)
    if training is None:
        raise VitpruneError("HiAP trains its gates with its weights: give --epochs 1 or more")
    config.validate()
    training.validate()
    ctx = distributed(source.device)
    dense, sets = load_inputs(model, source, data, seed=training.seed)
    report = run_hiap(dense, sets["train"], sets["val"], run_dir=out, train=training, config=config,
                      device=ctx.device, progress=not output.json and ctx.is_main, resume=output.resume, dist=ctx,
                      speed=speed, log=(lambda _m: None) if output.json else err_console.print,
                      on_epoch=None if output.json else lambda stats: render_hiap_epoch(stats, config.target_macs))
    show_report(model, report, render_hiap, output.json)
    _state_lr(training, recipe, output.json)


def _run_calibrated(run: Callable[..., Report], render: Callable[[str, Any], None], config: Any, *, model: str,
                    out: Path, source: ModelSource, data: DataSource, speed: SpeedConfig, output: RunOutput) -> None:
    """Load MODEL and --data (training images augmented for fine-tuning and plain for calibration), run a
    method's pipeline into --out and show its report."""
    ctx = distributed(source.device)
    dense, sets = load_inputs(model, source, data, seed=config.seed, splits=("train", "val", "calibration"))
    report = run(dense, sets["train"], sets["val"], calibration_set=sets["calibration"], run_dir=out, config=config,
                 device=ctx.device, progress=not output.json and ctx.is_main, resume=output.resume, speed=speed,
                 dist=ctx, log=(lambda _m: None) if output.json else err_console.print)
    show_report(model, report, render, output.json)
