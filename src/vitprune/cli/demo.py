"""``vitprune demo``: the main job on the embedded default (digits ViT), end to end, offline.

Train (once, then cached) or load the digits ViT; evaluate, profile and time it; then prune it
with HetDPT (predictor -> learned importance -> self-distilled fine-tune -> merge), and show what
was gained, measured.
"""

from __future__ import annotations

from pathlib import Path

import typer

from vitprune.cli.app import app, console, err_console, print_json
from vitprune.cli.config_options import config_options
from vitprune.cli.options import JSON_OPT
from vitprune.cli.render import render_eval, render_profile, render_speed
from vitprune.measure import SpeedConfig

DEMO_BUDGET = 8


@app.command()
@config_options(SpeedConfig, param="speed", prefix="speed_")
def demo(
    out: Path = typer.Option(Path("vitprune-demo"), "--out", help="Where the pruned model, plots and report go."),
    budget: int = typer.Option(DEMO_BUDGET, "--budget", "-k", help="Layers HetDPT removes (of 24)."),
    speed: SpeedConfig = ...,
    fresh: bool = typer.Option(False, "--fresh", help="Delete --out first instead of reusing its finished stages."),
    json_out: bool = JSON_OPT,
) -> None:
    """Train or load the digits ViT, measure it, prune it with HetDPT and compare dense vs pruned."""
    import shutil

    from vitprune.adapters import get_adapter
    from vitprune.data import build_dataset, build_loader
    from vitprune.measure import count_macs, measure_speed
    from vitprune.methods.hetdpt import HetDPTRun, preset, run_hetdpt
    from vitprune.methods.hetdpt.render import render_hetdpt
    from vitprune.models import create_model
    from vitprune.runs import MethodData, RunContext
    from vitprune.training import evaluate

    model = create_model("digits-vit", pretrained=True)
    input_size = get_adapter(model).input_size
    train, val = (build_dataset("digits", split, input_size=input_size) for split in ("train", "val"))
    plain_train = build_dataset("digits", "train", input_size=input_size, is_training=False)
    metrics = evaluate(model, build_loader(val, 256, shuffle=False, seed=0), progress=not json_out)
    full, linear = count_macs(model), count_macs(model, convention="linear")
    latency, throughput = ((measure_speed(model, batch_size=batch, repeats=speed.pairs, progress=not json_out)
                            for batch in (1, speed.batch_size)) if speed.enabled else (None, None))
    if not json_out:
        console.rule("digits-vit: the embedded default (starting checkpoint: trained by vitprune, cached)")
        render_eval("digits-vit", "digits", "val", metrics)
        render_profile("digits-vit", full)
        console.print(f"linear-only convention (no attention matmuls): {linear.macs:,} MACs per image")
        if speed.enabled:
            render_speed("digits-vit (latency, batch 1)", latency)
            render_speed(f"digits-vit (throughput, batch {speed.batch_size})", throughput)
        console.rule(f"HetDPT: remove {budget} of the 24 attention + GELU layers")
    if fresh and out.exists():
        shutil.rmtree(out)
    report = run_hetdpt(model, MethodData(train, val, plain_train), HetDPTRun(budget, config=preset("digits")),
                        RunContext(out, progress=not json_out, resume=True, speed=speed,
                                   log=(lambda _m: None) if json_out else err_console.print))
    if json_out:
        print_json({
            "model": "digits-vit", "starting_checkpoint": "digits-vit (trained by vitprune, cached)",
            "eval": metrics, "profile": full.to_dict(), "linear_macs": linear.macs,
            "latency": latency and latency.to_dict(), "throughput": throughput and throughput.to_dict(),
            "hetdpt": report.to_dict(),
        })
        return
    render_hetdpt(console, "digits-vit", report)
