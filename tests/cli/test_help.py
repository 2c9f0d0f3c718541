"""Every command's --help reads in an 80-column terminal: no line is wider, and descriptions get most of the width."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from vitprune.cli import app


def command_tree(command=None, path=()) -> dict[tuple[str, ...], object]:
    """Every command and group of the app (or under ``command``) by its words, the app itself as ``()``."""
    command = typer.main.get_command(app) if command is None else command
    subs = getattr(command, "commands", {})
    return {path: command} | {p: c for name, sub in sorted(subs.items())
                               for p, c in command_tree(sub, (*path, name)).items()}


PATHS = list(command_tree())


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "vitprune")
def test_help_fits_80_columns(path):
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80, "\n".join(line for line in lines if len(line) > 80)
    # Plain help, no boxed table: the boxes' type column left descriptions two to four words a line.
    assert "│" not in result.output
    # An option's description starts within the first 34 columns, leaving it 46 or more to wrap in.
    starts = [m.end() for line in lines if (m := re.match(r"^  -\S.*?\s{2,}(?=\S)", line))]
    assert max(starts, default=0) <= 34


def test_every_command_is_covered():
    assert ("prune", "hiap") in PATHS and ("finetune",) in PATHS and len(PATHS) >= 18
