"""``vitprune prune NAME``: one command per registered method (:mod:`vitprune.methods.base`), generated.

A method's command takes MODEL, ``--out``, one option per field its config exposes, and the shared groups, each
declared once as a dataclass: the model source (:class:`~vitprune.cli.options.ModelSource`), the data
(:class:`~vitprune.cli.options.DataSource`, for a method that reads data), the speed measurement
(:class:`~vitprune.measure.SpeedConfig`), ``--resume`` (a run directory) or ``--overwrite`` (one model directory)
and ``--json``. A method with a command of its own in ``cli/prune.py`` (presets and fine-tune defaults that its
config does not hold yet) keeps it; every other registered method, one registered by a user's package too, gets
its command here.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import typer

from vitprune.cli.app import MODEL_HELP, app, err_console
from vitprune.cli.config_options import config_options
from vitprune.cli.options import (
    JSON_OPT, OVERWRITE_OPT, RESUME_OPT, SEED_OPT, DataSource, ModelSource, check_target, distributed, load_inputs,
)
from vitprune.cli.render import render_report, show_edit, show_report
from vitprune.config import cli_facts
from vitprune.measure import SpeedConfig
from vitprune.methods.base import Method, MethodData, RunContext, methods, validate_config

prune_app = typer.Typer(help="Prune a model and save it (base model + recipe of edits + weights).",
                        no_args_is_help=True)
app.add_typer(prune_app, name="prune")


def _has_seed(method: Method) -> bool:
    """Whether the method's config exposes a ``seed``, which then also draws a --no-pretrained model's weights."""
    return any(f.name == "seed" and cli_facts(f) for f in dataclasses.fields(method.config))


def method_command(method: Method) -> Any:
    """The typer command of ``method``: its options from its config and the shared groups."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    out_help = ("Directory to save the pruned model to." if method.out_is_model else
                "Run directory: the method's stage files, model/, report.json.")
    parameters = [
        inspect.Parameter("model", keyword, annotation=str,
                          default=typer.Argument(..., help=method.model_help or MODEL_HELP)),
        inspect.Parameter("out", keyword, annotation=Path, default=typer.Option(..., "--out", help=out_help)),
        inspect.Parameter("config", keyword, default=...),
        inspect.Parameter("source", keyword, default=...),
        *([inspect.Parameter("data", keyword, default=...)] if method.data else []),
        *([] if _has_seed(method) else [inspect.Parameter("seed", keyword, annotation=int, default=SEED_OPT)]),
        inspect.Parameter("speed", keyword, default=...),
        inspect.Parameter("again", keyword, annotation=bool,
                          default=OVERWRITE_OPT if method.out_is_model else RESUME_OPT),
        inspect.Parameter("json_out", keyword, annotation=bool, default=JSON_OPT),
    ]

    def command(**options: Any) -> None:
        _run(method, **options)

    command.__signature__ = inspect.Signature(parameters)
    command.__name__ = method.name.replace("-", "_")
    command.__doc__ = method.help
    command = config_options(SpeedConfig, param="speed", prefix="speed_")(command)
    if method.data:
        command = config_options(DataSource, param="data",
                                 required=() if method.data_optional else ("data",))(command)
    command = config_options(ModelSource, param="source")(command)
    return config_options(method.config)(command)


def _run(method: Method, *, model: str, out: Path, config: Any, source: ModelSource, speed: SpeedConfig,
         again: bool, json_out: bool, data: DataSource | None = None, seed: int | None = None) -> None:
    """Load MODEL (and --data's sets the method reads), run the method into --out and show its report."""
    ctx = distributed(source.device)
    if method.out_is_model:
        check_target(out, again, "--out")
    validate_config(config)
    seed = config.seed if seed is None else seed
    if data is not None and data.data is not None:
        dense, sets = load_inputs(model, source, data, seed=seed, splits=method.data)
    else:
        from vitprune.models import resolve_model

        dense, sets = resolve_model(model, pretrained=source.pretrained, checkpoint=source.checkpoint, seed=seed), {}
    report = method.run(dense, MethodData(**sets), config, RunContext(
        run_dir=out, device=ctx.device, progress=not json_out and ctx.is_main, resume=not method.out_is_model and again,
        log=(lambda _m: None) if json_out else err_console.print, speed=speed, dist=ctx, name=model))
    if method.out_is_model:
        show_edit(report, json_out, title=f"{model}: {method.title_of(report)}")
    else:
        show_report(model, report, lambda name, r: render_report(name, r, method.name), json_out)


def add_method_commands() -> None:
    """Give every registered method that has no command yet its ``vitprune prune NAME`` command."""
    have = {info.name or info.callback.__name__ for info in prune_app.registered_commands}
    for name, method in methods().items():
        if method.command and name not in have:
            prune_app.command(name, help=method.help)(method_command(method))


__all__ = ["add_method_commands", "method_command", "prune_app"]
