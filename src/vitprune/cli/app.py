"""The ``vitprune`` command: one Typer app; user errors end as one line and a non-zero exit."""

from __future__ import annotations

import io
import json
import os
import shlex
import sys
import warnings
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from vitprune.errors import VitpruneError, VitpruneWarning
from vitprune.version import __version__

try:  # recent typer vendors its own click, whose usage errors are not click's classes
    from typer._click import ClickException as _ClickException
except ImportError:
    from click import ClickException as _ClickException

app = typer.Typer(
    name="vitprune",
    help="Turn a trained vision transformer into a physically smaller, measurably faster one.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib import metadata  # torch's version from its metadata: importing torch would cost seconds

        typer.echo(f"vitprune {__version__} (torch {metadata.version('torch')})")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                          help="Print vitprune's and torch's versions and exit.")) -> None:
    """The options of ``vitprune`` itself, before a command."""


#: Human-readable output; machine-readable JSON goes to stdout through :func:`print_json`.
console = Console()
err_console = Console(stderr=True)

MODEL_HELP = ("A timm model name, 'digits-vit' (the embedded default), 'cluttered-mnist-vit' (a harder benchmark; "
              "needs vitprune[bench]), 'lvvit-s' or 'lvvit-m' (LV-ViT; add -cls for its class head alone), a "
              "directory written by vitprune, or a Hugging Face ViT/DeiT classifier (a save_pretrained directory, or "
              "hf:owner/name; needs vitprune[hf]).")


def print_json(data: Any) -> None:
    """Print ``data`` as JSON on stdout (nothing else is printed there in --json mode; under torchrun, rank 0's
    only)."""
    if console.quiet:
        return
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning user errors into one line on stderr and a non-zero exit."""
    args = sys.argv[1:] if argv is None else list(argv)
    # Under torchrun every process runs the command; one report, one table and one error line come from rank 0.
    console.quiet = err_console.quiet = _rank() > 0
    if isinstance(sys.stdout, io.TextIOWrapper):  # a log file (CI, nohup) then takes each line as it is written
        sys.stdout.reconfigure(line_buffering=True)
    shown, warnings.showwarning = warnings.showwarning, _warning_line(warnings.showwarning)
    try:
        code = _run(args)
    except BaseException:  # a bug: its traceback prints as the process ends
        _leave_process_group(None)
        raise
    finally:
        warnings.showwarning = shown
    _leave_process_group(code)
    if code:
        sys.exit(code)


def _run(args: list[str]) -> int:
    """Run the command ``args`` name; its exit status (a user error: one line, and its status)."""
    try:
        # Typer turns Ctrl-C into exit code 130, which it returns (not raises) when not in standalone mode.
        if app(args=args, standalone_mode=False) == INTERRUPTED:
            return _interrupted(args)
    except VitpruneError as exc:
        _error_line(str(exc))
        return exc.exit_code
    except OSError as exc:  # the file system refused what no check foresaw: permissions, a full disk
        _error_line(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
        return 1
    except typer.Exit as exc:
        return exc.exit_code
    except _ClickException as exc:
        if not err_console.quiet:
            exc.show()
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        return _interrupted(args)
    return 0


def _error_line(message: str) -> None:
    # Escaped: a message may hold brackets (pip extras, index lists) that rich would take for markup.
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def _warning_line(other):
    """Python's ``showwarning`` that prints a :class:`VitpruneWarning` as one ``warning:`` line (as errors are printed)
    and hands any other warning to ``other``."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, VitpruneWarning):
            err_console.print(f"[bold yellow]warning:[/] {escape(str(message))}", highlight=False, soft_wrap=True)
        else:
            other(message, category, filename, lineno, file, line)

    return show


def _leave_process_group(code: int | None) -> None:
    """Leave the process group a command joined under torchrun: end the process with ``code`` at once
    (:func:`~vitprune.training.distributed.exit_distributed`), or, with ``None`` (an error in flight), destroy the
    group and let the error end the process."""
    if "torch.distributed" not in sys.modules:  # never imported by commands that need no group
        return
    from vitprune.training.distributed import exit_distributed, shutdown_distributed

    if code is None:
        shutdown_distributed()
    else:
        exit_distributed(code)


def _rank() -> int:
    """This process's rank under torchrun (``RANK``), 0 outside it."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:  # init_distributed names the bad variable when the command starts
        return 0


#: The exit status of an interrupted command (128 + SIGINT), as shells report it.
INTERRUPTED = 130


def _interrupted(args: list[str]) -> int:
    """Say what an interrupted command left in its --out and the exact command that continues it; 130."""
    if _takes_resume(args) and "--out" in args[:-1]:
        out = args[args.index("--out") + 1]
        path = Path(out)
        written = sorted(f"{p.name}/" if p.is_dir() else p.name for p in path.iterdir()) if path.is_dir() else []
        if written:
            left = f"{out} holds {', '.join(written)}"
            again = shlex.join(["vitprune", *args, *([] if "--resume" in args else ["--resume"])])
        else:  # nothing to continue: the same command starts afresh
            left = f"nothing was written to {out} yet"
            again = shlex.join(["vitprune", *args])
        err_console.print(f"interrupted: {escape(left)}; continue with: {escape(again)}", highlight=False,
                          soft_wrap=True)
    else:
        err_console.print("interrupted", highlight=False)
    return INTERRUPTED


def _takes_resume(args: list[str]) -> bool:
    """Whether the command that ``args`` name has a ``--resume`` option."""
    command = typer.main.get_command(app)
    for word in args:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        command = sub
    return any("--resume" in getattr(param, "opts", ()) for param in command.params)
