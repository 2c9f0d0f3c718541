"""``vitprune demo``: the main job on the embedded default (digits ViT), end to end, offline."""

from __future__ import annotations

import typer

from vitprune.cli.app import app, console, print_json
from vitprune.cli.commands import JSON_OPT
from vitprune.cli.render import render_eval, render_profile, render_speed


@app.command()
def demo(
    repeats: int = typer.Option(20, min=3, help="Timed runs per speed measurement."),
    json_out: bool = JSON_OPT,
) -> None:
    """Train (once, then cached) or load the digits ViT, then evaluate, profile and benchmark it."""
    from vitprune.adapters import get_adapter
    from vitprune.data import build_dataset, build_loader
    from vitprune.measure import count_macs, measure_speed
    from vitprune.models import create_model
    from vitprune.training import evaluate

    model = create_model("digits-vit", pretrained=True)
    val = build_dataset("digits", "val", input_size=get_adapter(model).input_size)
    metrics = evaluate(model, build_loader(val, 256, shuffle=False, seed=0), progress=not json_out)
    full, linear = count_macs(model), count_macs(model, convention="linear")
    latency = measure_speed(model, batch_size=1, repeats=repeats, progress=not json_out)
    throughput = measure_speed(model, batch_size=64, repeats=repeats, progress=not json_out)
    if json_out:
        print_json({
            "model": "digits-vit", "starting_checkpoint": "digits-vit (trained by vitprune, cached)",
            "eval": metrics, "profile": full.to_dict(), "linear_macs": linear.macs,
            "latency": latency.to_dict(), "throughput": throughput.to_dict(),
        })
        return
    console.rule("digits-vit: the embedded default (starting checkpoint: trained by vitprune, cached)")
    render_eval("digits-vit", "digits", "val", metrics)
    render_profile("digits-vit", full)
    console.print(f"linear-only convention (no attention matmuls): {linear.macs:,} MACs per image")
    render_speed("digits-vit (latency, batch 1)", latency)
    render_speed("digits-vit (throughput, batch 64)", throughput)
