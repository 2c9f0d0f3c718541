"""``vitprune export``: a (pruned) model as an ONNX file, checked against PyTorch with onnxruntime."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from vitprune.cli.app import MODEL_HELP, app, console, print_json
from vitprune.cli.config_options import config_options
from vitprune.cli.options import JSON_OPT, OVERWRITE_OPT, ModelSource
from vitprune.config import setting
from vitprune.errors import VitpruneError
from vitprune.measure import SpeedConfig
from vitprune.runs.context import check_target


@dataclass
class ExportCheck:
    """How the export is made and checked against PyTorch."""

    dynamic_batch: bool = setting(True, flag="--dynamic-batch/--static-batch", help="Batch size free or fixed.")
    check_batch: int = setting(2, min=1, help="Random images the check runs on (and the batch of a static export).")
    atol: float = setting(1e-4, help="Largest difference from PyTorch's outputs accepted.")
    threads: Optional[int] = setting(None, min=1, help="Threads of both runtimes (default: their own).")


@app.command()
@config_options(ModelSource, param="source", fields=("pretrained", "checkpoint"))
@config_options(ExportCheck, param="check")
@config_options(SpeedConfig, param="speed", prefix="speed_")
def export(
    model: str = typer.Argument(..., help=MODEL_HELP),
    onnx: Optional[Path] = typer.Option(None, "--onnx", help="ONNX file to write (atomically, only if it checks "
                                                             "out)."),
    native: Optional[Path] = typer.Option(
        None, "--native", help="Instead of ONNX: a directory in the model's own library's format, loadable without "
                               "vitprune (Hugging Face: save_pretrained; uniform width pruning only), kept only if "
                               "the reloaded model checks out."),
    check: ExportCheck = ...,
    speed: SpeedConfig = ...,
    source: ModelSource = ...,
    overwrite: bool = OVERWRITE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Export MODEL to ONNX (any statically shaped pruned model), check it with onnxruntime, and time onnxruntime
    against PyTorch (both on the CPU; a static export at its own batch); or, with --native, write it in its own
    library's format where that format can describe it."""
    from vitprune.adapters import get_adapter
    from vitprune.runs.render import render_comparison
    from vitprune.export import OnnxRuntimeModel, export_onnx
    from vitprune.measure import compare_speed
    from vitprune.models import resolve_model

    if (onnx is None) == (native is None):
        raise VitpruneError("give one target: --onnx FILE or --native DIR")
    check_target(onnx or native, overwrite, "--onnx" if native is None else "--native")
    net = resolve_model(model, pretrained=source.pretrained, checkpoint=source.checkpoint)
    if native is not None:
        diff = get_adapter(net).save_native(native, atol=check.atol)
        if json_out:
            print_json({"model": model, "native": str(native), "max_abs_diff": diff})
        else:
            console.print(f"wrote {native}: {model}, which reloads without vitprune and matches it to {diff:.1e} (max "
                          "abs diff of the logits on 2 random images)")
        return
    result = export_onnx(net, onnx, dynamic_batch=check.dynamic_batch, check_batch=check.check_batch,
                         atol=check.atol)
    summary = {"model": model, **result.to_dict(), "speed_vs_pytorch": None}
    if speed.enabled:
        summary["speed_vs_pytorch"] = compare_speed(
            OnnxRuntimeModel(onnx, check.threads), net, input_size=get_adapter(net).input_size,
            batch_size=speed.batch_size if check.dynamic_batch else check.check_batch, pairs=speed.pairs,
            warmup=speed.warmup, threads=check.threads, progress=not json_out).to_dict()
    if json_out:
        print_json(summary)
        return
    batch = "dynamic" if check.dynamic_batch else f"static ({check.check_batch})"
    console.print(f"wrote {onnx}: {model}, input {'x'.join(map(str, result.input_size))}, batch {batch}; "
                  f"onnxruntime {result.onnxruntime} matches PyTorch to {result.max_abs_diff:.1e} (max abs diff over "
                  f"{check.check_batch} random images, tolerance {check.atol:.0e})")
    render_comparison(console, "onnxruntime", "pytorch", summary["speed_vs_pytorch"])
