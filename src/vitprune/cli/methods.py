"""``vitprune prune NAME``: one command per registered method with a command part
(:class:`~vitprune.runs.method.CommandLine`), generated.

A method's command takes MODEL, ``--out``, one option per field its config exposes, and the shared groups, each
declared once as a dataclass: the model source (:class:`~vitprune.cli.options.ModelSource`), the data
(:class:`~vitprune.cli.options.DataSource`, for a method that reads data), the speed measurement
(:class:`~vitprune.measure.SpeedConfig`), the fine-tune group (:class:`~vitprune.training.presets.FinetuneOptions`,
for a method with a training :attr:`~vitprune.runs.method.CommandLine.recipe`) and the output
(:class:`~vitprune.cli.options.RunOutput` into a run directory, :class:`~vitprune.cli.options.ModelOutput` into one
model directory). Every method with a command part, one another installed package declares too, gets its command
here, shown by the method's own :meth:`~vitprune.runs.method.CommandLine.render`; a method whose command is written by
hand (:attr:`~vitprune.runs.method.CommandLine.handwritten`: HetDPT's and HetDPT+'s, whose options change a preset) has
it in ``cli/prune.py``.
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
    SEED_OPT, DataSource, FinetuneOptions, ModelOutput, ModelSource, RunOutput, distributed, load_inputs,
)
from vitprune.cli.render import render_lr, show_report
from vitprune.config import cli_facts
from vitprune.measure import SpeedConfig
from vitprune.runs.context import MethodData, RunContext, check_target
from vitprune.runs.method import CommandLine, Method, methods, validate_config

prune_app = typer.Typer(help="Prune a model and save it (base model + recipe of edits + weights).",
                        no_args_is_help=True)
app.add_typer(prune_app, name="prune")


def _options(method: Method) -> type:
    """The dataclass the method's command options come from."""
    return method.options or method.config


def _has_seed(method: Method) -> bool:
    """Whether the method's options expose a ``seed``, which then also draws a --no-pretrained model's weights."""
    return any(f.name == "seed" and cli_facts(f) for f in dataclasses.fields(_options(method)))


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
        *([inspect.Parameter("finetune", keyword, default=...)] if method.recipe else []),
        *([] if _has_seed(method) else [inspect.Parameter("seed", keyword, annotation=int, default=SEED_OPT)]),
        inspect.Parameter("speed", keyword, default=...),
        inspect.Parameter("output", keyword, default=...),
    ]

    def command(**options: Any) -> None:
        _run(method, **options)

    command.__signature__ = inspect.Signature(parameters)
    command.__name__ = method.name.replace("-", "_")
    command.__doc__ = method.help
    command = config_options(ModelOutput if method.out_is_model else RunOutput, param="output")(command)
    command = config_options(SpeedConfig, param="speed", prefix="speed_")(command)
    if method.recipe:
        command = config_options(FinetuneOptions, param="finetune")(command)
    if method.data:
        command = config_options(DataSource, param="data",
                                 required=() if method.data_optional else ("data",))(command)
    command = config_options(ModelSource, param="source")(command)
    return config_options(_options(method))(command)


def _run(method: Method, *, model: str, out: Path, config: Any, source: ModelSource, speed: SpeedConfig,
         output: RunOutput | ModelOutput, data: DataSource | None = None, seed: int | None = None,
         finetune: FinetuneOptions | None = None) -> None:
    """The generated command: the config from its options (and fine-tune group), then :func:`run_method`."""
    seed = config.seed if seed is None else seed
    training = None
    if method.recipe is not None:
        recipe = finetune.recipe(method.recipe)
        training = finetune.training(recipe, seed=seed, batch=method.train_batch)
        config = method.from_command(config, training)
    run_method(method, model, config, out=out, source=source, data=data, speed=speed, output=output, seed=seed)
    if training is not None and not output.json:
        render_lr(training, recipe)


def run_method(method: Method, model: str, config: Any, *, out: Path, source: ModelSource, data: DataSource | None,
               speed: SpeedConfig, output: RunOutput | ModelOutput, seed: int) -> None:
    """Load MODEL (random weights drawn under ``seed``) and the sets of --data the method reads, run ``method`` with
    ``config`` into --out and show its report."""
    ctx = distributed(source.device)
    writes_model = isinstance(output, ModelOutput)
    if writes_model:
        check_target(out, output.overwrite, "--out")
    validate_config(config)
    if data is not None and data.data is not None:
        dense, sets = load_inputs(model, source, data, seed=seed, splits=method.data)
    else:
        from vitprune.models import resolve_model

        dense, sets = resolve_model(model, pretrained=source.pretrained, checkpoint=source.checkpoint, seed=seed), {}
    report = method.run(dense, MethodData(**sets), config, RunContext(
        run_dir=out, device=ctx.device, progress=not output.json and ctx.is_main,
        resume=not writes_model and output.resume, overwrite=writes_model and output.overwrite,
        log=(lambda _m: None) if output.json else err_console.print, speed=speed, dist=ctx, name=model,
        on_epoch=None if output.json else method.epoch_view(err_console)))
    show_report(model, report, method.render, output.json)


def command_methods() -> dict[str, Method]:
    """The methods with a ``vitprune prune NAME`` command."""
    return {name: method for name, method in methods().items() if isinstance(method, CommandLine)}


def add_method_commands() -> None:
    """Give every method with a command part that has no command yet its generated ``vitprune prune NAME`` command
    (not one written by hand in ``cli/prune.py``)."""
    have = {info.name or info.callback.__name__ for info in prune_app.registered_commands}
    for name, method in command_methods().items():
        if not method.handwritten and name not in have:
            prune_app.command(name, help=method.help)(method_command(method))


__all__ = ["add_method_commands", "command_methods", "method_command", "prune_app", "run_method"]
