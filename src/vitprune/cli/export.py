"""``vitprune export``: a (pruned) model as an ONNX file, checked against PyTorch with onnxruntime."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from vitprune.cli.app import MODEL_HELP, app, console, print_json
from vitprune.cli.commands import CHECKPOINT_OPT, JSON_OPT, OVERWRITE_OPT, check_target
from vitprune.cli.prune import PRETRAINED_OPT


@app.command()
def export(
    model: str = typer.Argument(..., help=MODEL_HELP),
    onnx: Path = typer.Option(..., "--onnx", help="ONNX file to write (atomically, only if it checks out)."),
    dynamic_batch: bool = typer.Option(True, "--dynamic-batch/--static-batch", help="Batch size free or fixed."),
    check_batch: int = typer.Option(2, "--check-batch", min=1, help="Random images the check runs on (and the "
                                                                    "batch of a static export)."),
    atol: float = typer.Option(1e-4, "--atol", help="Largest difference from PyTorch's outputs accepted."),
    bench: bool = typer.Option(False, "--bench", help="Also time onnxruntime against PyTorch (alternating pairs)."),
    batch_size: int = typer.Option(16, "--batch-size", "-b", min=1, help="Batch of the --bench timing."),
    repeats: int = typer.Option(20, min=3, help="Timed pairs of the --bench timing."),
    threads: Optional[int] = typer.Option(None, min=1, help="Threads of both runtimes (default: their own)."),
    pretrained: bool = PRETRAINED_OPT,
    checkpoint: Optional[Path] = CHECKPOINT_OPT,
    overwrite: bool = OVERWRITE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Export MODEL to ONNX (any statically shaped pruned model), check it with onnxruntime, optionally time it."""
    from vitprune.adapters import get_adapter
    from vitprune.cli.render import render_comparison
    from vitprune.errors import VitpruneError
    from vitprune.export import OnnxRuntimeModel, export_onnx
    from vitprune.measure import compare_speed
    from vitprune.models import resolve_model

    check_target(onnx, overwrite, "--onnx")
    if bench and not dynamic_batch and batch_size != check_batch:
        raise VitpruneError(f"a static export takes batches of {check_batch} only: pass --batch-size {check_batch}")
    net = resolve_model(model, pretrained=pretrained, checkpoint=checkpoint)
    result = export_onnx(net, onnx, dynamic_batch=dynamic_batch, check_batch=check_batch, atol=atol)
    summary = {"model": model, **result.to_dict()}
    comparison = None
    if bench:
        comparison = compare_speed(OnnxRuntimeModel(onnx, threads), net, input_size=get_adapter(net).input_size,
                                   batch_size=batch_size, pairs=repeats, warmup=3, threads=threads,
                                   progress=not json_out)
        summary["speed_vs_pytorch"] = comparison.to_dict()
    if json_out:
        print_json(summary)
        return
    batch = "dynamic" if dynamic_batch else f"static ({check_batch})"
    console.print(f"wrote {onnx}: {model}, input {'x'.join(map(str, result.input_size))}, batch {batch}; "
                  f"onnxruntime {result.onnxruntime} matches PyTorch to {result.max_abs_diff:.1e} (max abs diff over "
                  f"{check_batch} random images, tolerance {atol:.0e})")
    if comparison is not None:
        render_comparison("onnxruntime", "pytorch", comparison)
