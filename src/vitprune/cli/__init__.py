"""Command-line interface (``vitprune ...``)."""

from vitprune.cli.app import app, main

__all__ = ["app", "main"]
