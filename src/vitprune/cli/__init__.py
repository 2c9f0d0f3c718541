"""Command-line interface (``vitprune ...``): importing this package registers every command on :data:`app`, a
``vitprune prune NAME`` command for every registered method among them."""

from vitprune.cli.app import app
from vitprune.cli.app import main as _main
from vitprune.cli import analyze, chain, commands, compare, demo, export, finetune, prune  # noqa: E402, F401  (registers them)
from vitprune.cli.methods import add_method_commands

add_method_commands()


def main(argv: list[str] | None = None) -> None:
    """Entry point: the commands of methods registered since the import too, then the app
    (:func:`vitprune.cli.app.main`)."""
    add_method_commands()
    _main(argv)


__all__ = ["app", "main"]
