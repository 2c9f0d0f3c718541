"""``profile``, ``bench``, ``eval`` and ``info``: look at a model without changing it."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from vitprune.cli.app import MODEL_HELP, app, console, print_json
from vitprune.cli.options import (
    DEVICE_OPT, JSON_OPT, REPEATS_OPT, SPEED_BATCH_OPT, Convention, Inputs, input_groups,
)
from vitprune.cli.render import render_eval, render_profile, render_speed
from vitprune.device import resolve_device
from vitprune.measure import CONVENTIONS, SpeedConfig
from vitprune.runs.render import render_comparison


class DType(str, Enum):
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"


@app.command()
def profile(
    model: str = typer.Argument(..., help=MODEL_HELP),
    convention: Convention = typer.Option(
        Convention.full, help="; ".join(f"{name}: {what}" for name, what in CONVENTIONS.items())),
    json_out: bool = JSON_OPT,
) -> None:
    """MACs (per image) and parameters, block by block. Weights are not needed and never downloaded."""
    from vitprune.measure import count_macs
    from vitprune.models import resolve_model

    report = count_macs(resolve_model(model, pretrained=False), convention=convention.value)
    if json_out:
        print_json({"model": model, **report.to_dict()})
    else:
        render_profile(model, report)


@app.command()
def bench(
    model: str = typer.Argument(..., help=MODEL_HELP),
    vs: Optional[str] = typer.Option(None, "--vs", help="Compare against OTHER: speedup = OTHER's time / MODEL's time."),
    speed_batch: int = SPEED_BATCH_OPT,
    repeats: int = REPEATS_OPT,
    warmup: int = typer.Option(SpeedConfig.warmup, min=0, help="Untimed runs first."),
    device: str = DEVICE_OPT,
    dtype: DType = typer.Option(DType.float32, help="Weights and input dtype."),
    threads: Optional[int] = typer.Option(None, min=1, help="CPU threads (default: torch's)."),
    json_out: bool = JSON_OPT,
) -> None:
    """Measured latency/throughput: warm-up, repeats, median and spread; with --vs, alternating A/B pairs.
    Weights are not needed (random ones time the same) and never downloaded."""
    import torch

    from vitprune.measure import compare_speed, measure_speed
    from vitprune.models import resolve_model

    options = dict(batch_size=speed_batch, device=resolve_device(device), dtype=getattr(torch, dtype.value),
                   warmup=warmup, threads=threads, progress=not json_out)
    subject = resolve_model(model, pretrained=False)
    if vs is None:
        result = measure_speed(subject, repeats=repeats, **options)
        if json_out:
            print_json({"model": model, **result.to_dict()})
        else:
            render_speed(model, result)
        return
    comparison = compare_speed(subject, resolve_model(vs, pretrained=False), pairs=repeats, **options)
    if json_out:
        print_json({"model": model, "vs": vs, **comparison.to_dict()})
    else:
        render_comparison(console, model, vs, comparison.to_dict())


@app.command("eval")
@input_groups
def evaluate_cmd(
    model: str = typer.Argument(..., help=MODEL_HELP),
    inputs: Inputs = ...,
    split: str = typer.Option("val", help="Dataset split."),
    batch_size: int = typer.Option(128, "--batch-size", "-b", min=1, help="Images per forward pass."),
    json_out: bool = JSON_OPT,
) -> None:
    """Top-1/top-5 accuracy and loss of MODEL on a dataset split."""
    from vitprune.data import build_loader
    from vitprune.training import evaluate

    net, sets = inputs.load(model, {split: (split, False)})
    net, dataset, data = net.to(resolve_device(inputs.source.device)), sets[split], inputs.data
    metrics = evaluate(net, build_loader(dataset, batch_size, shuffle=False, seed=0), progress=not json_out)
    if json_out:
        print_json({"model": model, "data": data.data, "split": split, **metrics})
    else:
        render_eval(model, data.data, split, metrics)


@app.command()
def info(directory: Path = typer.Argument(..., help="A directory written by vitprune."), json_out: bool = JSON_OPT) -> None:
    """The recipe of a saved model: base model, ordered edits, metadata, software versions."""
    from vitprune.recipe import check_weights, read_document

    doc = read_document(directory)
    check_weights(directory)  # a save whose weights cannot load is not a model to describe
    if json_out:
        print_json(doc)
        return
    base = doc["base"]
    console.print(f"[bold]{directory}[/]  recipe {doc['format']} v{doc['version']}")
    # A transformers base carries its whole config (with one label per class): cut, as the edits' arguments are.
    console.print(f"base: {base['source']}:{base['name']} {_short(base['kwargs'], 120)}  weights: {base['weights']}")
    table = Table("#", "edit", "arguments", title=f"{len(doc['edits'])} edits")
    for i, edit in enumerate(doc["edits"]):
        table.add_row(str(i), edit["op"], _short(edit["args"]))
    console.print(table)
    for key, value in doc.get("metadata", {}).items():
        console.print(f"{key}: {value}")
    console.print("saved with " + ", ".join(f"{k} {v}" for k, v in doc.get("software", {}).items()))


def _short(args: dict, limit: int = 80) -> str:
    text = ", ".join(f"{k}={v}" for k, v in args.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"
