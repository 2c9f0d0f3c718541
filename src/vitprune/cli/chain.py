"""``vitprune chain`` (any sequence of methods from a chain file, with fine-tuning where the file puts it) and
``vitprune prune hetdpt+`` (the chain HetDPT depth pruning -> width pruning -> fine-tune)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from vitprune.cli.app import MODEL_HELP, app, err_console
from vitprune.cli.options import (
    CHECKPOINT_OPT, DATA_OPT, DATA_ROOT_OPT, DEVICE_OPT, DOWNLOAD_OPT, JSON_OPT, PRETRAINED_OPT, REPEATS_OPT,
    RESUME_OPT, SPEED_BATCH_OPT, SPEED_OPT, Convention, Distill, speed_config,
)
from vitprune.cli.prune import Importance, _load_inputs, _show, hetdpt_preset_for, prune_app
from vitprune.measure import SpeedConfig


@app.command()
def chain(
    model: str = typer.Argument(..., help=MODEL_HELP),
    steps: Path = typer.Option(..., "--steps", help='Chain file (JSON): a list of steps such as {"method": "depth", '
                                                     '"attention": [0, 3]}; see docs/recipes.md.'),
    data: str = DATA_OPT,
    out: Path = typer.Option(..., "--out", help="Run directory: chain.json, steps/NN-METHOD/, model/, report.json."),
    preset: Optional[str] = typer.Option(None, help="HetDPT steps' default preset (digits or imagenet; default by "
                                                    "--data)."),
    onnx: bool = typer.Option(True, "--onnx/--no-onnx", help="Check that the final model exports to ONNX."),
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
    """Run a chain of methods (depth, hetdpt, width, vbp, star, hiap, finetune) in order; check and time the result."""
    from vitprune.cli.render import render_chain
    from vitprune.methods.chain import load_chain

    run_chain_command(model, load_chain(steps), data=data, out=out, preset=preset, onnx=onnx, resume=resume,
                      pretrained=pretrained, checkpoint=checkpoint, data_root=data_root, download=download,
                      speed=speed_config(speed, speed_batch, repeats), device=device, json_out=json_out,
                      render=render_chain)


def run_chain_command(model: str, steps: list, *, data: str, out: Path, preset: Optional[str], onnx: bool,
                      resume: bool, pretrained: bool, checkpoint: Optional[Path], data_root: Optional[Path],
                      download: bool, speed: SpeedConfig, device: str, json_out: bool, render) -> None:
    """Load MODEL and --data (with the calibration images VBP and STAR steps use), run ``steps`` into --out and show
    the report through ``render``."""
    from vitprune.device import resolve_device
    from vitprune.methods.chain import check_chain, run_chain

    preset = hetdpt_preset_for(preset, data)
    check_chain(steps, preset)  # before the data loads
    dense, sets = _load_inputs(model, data, pretrained=pretrained, checkpoint=checkpoint, data_root=data_root,
                               download=download, calibration=True)
    report = run_chain(dense, sets["train"], sets["val"], steps, run_dir=out, calibration_set=sets["calibration"],
                       device=resolve_device(device), progress=not json_out, resume=resume,
                       log=(lambda _m: None) if json_out else err_console.print,
                       preset=preset, speed=speed, onnx=onnx)
    _show(model, report, render, json_out)


@prune_app.command("hetdpt+")
def hetdpt_plus(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: str = DATA_OPT,
    budget: int = typer.Option(..., "--budget", "-k", help="Layers HetDPT removes: attention sublayers + GELUs."),
    macs: float = typer.Option(..., "--macs", help="Target GMACs per image after width pruning."),
    out: Path = typer.Option(..., "--out", help="Run directory: steps/ (hetdpt, width, finetune), model/, report."),
    split: str = typer.Option("auto", help="auto (the accuracy predictor decides) or A,G layers of each type."),
    convention: Convention = typer.Option(Convention.full, help="MAC convention of --macs: full (with attention "
                                                                 "matmuls) or linear (Linear/Conv only)."),
    importance: Importance = typer.Option(Importance.magnitude, help="Width importance: magnitude or taylor."),
    heads: bool = typer.Option(False, "--heads/--head-dims", help="Remove whole heads instead of head dimensions."),
    embed: bool = typer.Option(True, "--embed/--no-embed", help="Also prune the residual stream's channels."),
    isomorphic: bool = typer.Option(True, "--isomorphic/--global", help="Isomorphic Pruning or plain global ranking."),
    round_to: Optional[int] = typer.Option(None, "--round-to", min=1, help="Keep every width a multiple of N."),
    preset: Optional[str] = typer.Option(None, help="HetDPT settings: digits or imagenet (default by --data)."),
    epochs: Optional[int] = typer.Option(None, "--epochs", min=1, help="Fine-tuning epochs (preset's Stage 2)."),
    lr: Optional[float] = typer.Option(None, "--lr", help="Fine-tuning peak learning rate."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", "-b", min=1, help="Batch for every stage."),
    search_epochs: Optional[int] = typer.Option(None, "--search-epochs", min=1, help="HetDPT step-2 epochs."),
    probe_epochs: Optional[int] = typer.Option(None, "--probe-epochs", min=1, help="HetDPT predictor fine-tunes."),
    distill: Optional[Distill] = typer.Option(None, help="Distillation from the unpruned model (preset's default)."),
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
    """HetDPT+: HetDPT depth pruning, then width pruning (Isomorphic Pruning) to --macs, then one fine-tune with
    distillation from the unpruned model."""
    from dataclasses import asdict

    from vitprune.cli.render import render_chain
    from vitprune.methods.chain import hetdpt_plus_steps
    from vitprune.methods.hetdpt.pipeline import preset as hetdpt_preset

    name = hetdpt_preset_for(preset, data)
    base = hetdpt_preset(name)
    finetune = {**asdict(base.finetune), "distill": base.distill, "alpha": base.alpha, "tau": base.tau}
    finetune |= {k: v for k, v in (("epochs", epochs), ("lr", lr), ("batch_size", batch_size),
                                   ("distill", distill and distill.value)) if v is not None}
    hetdpt = {k: v for k, v in (("probe_epochs", probe_epochs), ("search_epochs", search_epochs),
                                ("batch_size", batch_size)) if v is not None}
    steps = hetdpt_plus_steps(budget=budget, target_macs=macs * 1e9, split=split, preset=name,
                              convention=convention.value, finetune=finetune, hetdpt=hetdpt,
                              width={"importance": importance.value, "heads": heads, "embed": embed,
                                     "isomorphic": isomorphic, "round_to": round_to})
    run_chain_command(model, steps, data=data, out=out, preset=name, onnx=True, resume=resume, pretrained=pretrained,
                      checkpoint=checkpoint, data_root=data_root, download=download,
                      speed=speed_config(speed, speed_batch, repeats), device=device, json_out=json_out,
                      render=render_chain)
