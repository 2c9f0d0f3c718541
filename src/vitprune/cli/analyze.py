"""``vitprune analyze``: HetDPT's motivating analyses, each written to --out as JSON and a PNG plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, List, Optional

import typer
from rich.table import Table

from vitprune.atomic import write_json
from vitprune.cli.app import MODEL_HELP, app, console, print_json
from vitprune.cli.config_options import config_options
from vitprune.cli.options import (
    IDENTITY_OPT, JSON_OPT, OVERWRITE_OPT, AttentionIdentity, Inputs, input_groups,
)
from vitprune.errors import VitpruneError
from vitprune.runs.context import check_target
from vitprune.runs.render import percent
from vitprune.training.config import TrainConfig

analyze_app = typer.Typer(
    help="HetDPT's analyses: mask-gradient disparity and single-layer recovery of attention vs activation layers.",
    no_args_is_help=True,
)
app.add_typer(analyze_app, name="analyze")


OUT_OPT = typer.Option(..., "--out", help="Directory for the JSON result and its plot (created if missing).")
BATCH_SIZE_OPT = typer.Option(64, "--batch-size", "-b", min=1, help="Images per measured batch.")


@analyze_app.command("gradient-disparity")
@input_groups
def gradient_disparity_cmd(
    model: str = typer.Argument(..., help=MODEL_HELP),
    inputs: Inputs = ...,
    out: Path = OUT_OPT,
    batches: Optional[int] = typer.Option(None, "--batches", min=1, help="Batches to measure (default: one epoch)."),
    batch_size: int = BATCH_SIZE_OPT,
    identity: AttentionIdentity = IDENTITY_OPT,
    overwrite: bool = OVERWRITE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Mean |dloss/dmask| of every attention and activation layer, all masks at 1 (HetDPT Fig. 4).

    Measured on the training split without augmentation, shuffled with seed 0, in eval mode.
    """
    _check_targets(out, "gradient_disparity", overwrite)
    from vitprune.data import build_loader
    from vitprune.device import resolve_device
    from vitprune.methods.hetdpt import gradient_disparity, plot_gradient_disparity

    net, sets = inputs.load(model, {"train": ("train", False)})
    net, dataset, data = net.to(resolve_device(inputs.source.device)), sets["train"], inputs.data
    loader = build_loader(dataset, batch_size, shuffle=True, seed=0)
    result = gradient_disparity(net, loader, identity=identity.value, max_batches=batches, progress=not json_out)
    document = {"model": model, "data": data.data, "split": "train", "batch_size": batch_size, "max_batches": batches,
                "seed": 0, **result}
    paths = _write(out, "gradient_disparity", document, plot_gradient_disparity)
    if json_out:
        print_json(document)
        return
    table = Table("block", "attention |g|", "activation |g|", "activation / attention",
                  title=f"{model}: mean |dloss/dmask| over {result['batches']} batches ({result['images']} images)")
    for block in sorted({int(b) for b in (*result["attention"], *result["activation"])}):
        att, act = (result[kind].get(str(block), {}).get("mean_abs") for kind in ("attention", "activation"))
        table.add_row(str(block), _num(att), _num(act), _num(act / att if att and act is not None else None))
    summary = result["summary"]
    table.add_section()
    table.add_row("mean", _num(summary["attention_mean_abs"]), _num(summary["activation_mean_abs"]),
                  _num(summary["ratio"]))
    console.print(table)
    console.print(f"wrote {paths[0]} and {paths[1]} (starting checkpoint: {model})")


@analyze_app.command("recovery")
@input_groups
@config_options(TrainConfig, param="train", fields=("epochs", "lr", "batch_size", "seed"), defaults={"epochs": 1})
def recovery_cmd(
    model: str = typer.Argument(..., help=MODEL_HELP),
    inputs: Inputs = ...,
    out: Path = OUT_OPT,
    layers: Optional[List[str]] = typer.Option(
        None, "--layers", help="TYPE:BLOCK[,TYPE:BLOCK...] with TYPE attention or activation, e.g. "
                               "attention:3,activation:5; repeatable (default: every layer)."),
    train: TrainConfig = ...,
    identity: AttentionIdentity = IDENTITY_OPT,
    overwrite: bool = OVERWRITE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Top-1 after removing each single layer, right away and after a short fine-tune (HetDPT Fig. 5)."""
    _check_targets(out, "recovery", overwrite)
    from vitprune.device import resolve_device
    from vitprune.methods.hetdpt import plot_recovery, recovery_asymmetry

    chosen = _parse_layers(layers) if layers else None
    dev = resolve_device(inputs.source.device)
    net, sets = inputs.load(model, {"train": ("train", True), "val": ("val", False)})
    net, data = net.to(dev), inputs.data
    result = recovery_asymmetry(net, sets["train"], sets["val"], config=train, layers=chosen, identity=identity.value,
                                device=dev, progress=not json_out)
    document = {"model": model, "data": data.data, **result}
    paths = _write(out, "recovery", document, plot_recovery)
    if json_out:
        print_json(document)
        return
    table = Table("layer", "block", "top-1 after removal", "after fine-tuning",
                  title=f"{model}: one layer removed, then {train.epochs} epoch(s) of fine-tuning "
                        f"(dense top-1 {percent(result['dense_top1'])})")
    for row in result["layers"]:
        table.add_row(row["type"], str(row["block"]), percent(row['top1_pruned']),
                      percent(row['top1_finetuned']))
    console.print(table)
    console.print(f"wrote {paths[0]} and {paths[1]} (starting checkpoint: {model})")


def _parse_layers(specs: list[str]) -> list[tuple[str, int]]:
    """``["attention:3,activation:5", ...]`` as ``[("attention", 3), ("activation", 5), ...]``.

    Only the form is checked here; the analysis checks the types and blocks against the model.
    """
    layers = []
    for item in (part.strip() for spec in specs for part in spec.split(",")):
        kind, _, block = item.partition(":")
        if not kind or not block.isdigit():
            raise VitpruneError(f"bad --layers entry {item!r}: expected TYPE:BLOCK, e.g. attention:3 or activation:5")
        layers.append((kind, int(block)))
    return layers


def _check_targets(out: Path, name: str, overwrite: bool) -> None:
    """Refuse, before any work, to replace an earlier ``name`` result in ``out`` unless ``overwrite``."""
    for suffix in (".json", ".png"):
        check_target(out / f"{name}{suffix}", overwrite, "--out")


def _write(out: Path, name: str, document: dict[str, Any],
           plot: Callable[[dict[str, Any], Path], Path]) -> tuple[Path, Path]:
    """Write ``out/name.json`` and ``out/name.png``, each atomically."""
    return write_json(out / f"{name}.json", document), plot(document, out / f"{name}.png")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"
