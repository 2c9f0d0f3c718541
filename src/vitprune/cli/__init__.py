"""Command-line interface (``vitprune ...``): importing this package registers every command on :data:`app`."""

from vitprune.cli.app import app, main
from vitprune.cli import analyze, chain, commands, demo, export, finetune, prune  # noqa: E402, F401  (registers them)

__all__ = ["app", "main"]
