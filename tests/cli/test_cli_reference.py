"""docs/cli.md is typer's reference of the ``vitprune`` app as it is now."""

from __future__ import annotations

import shlex
from pathlib import Path

from typer.testing import CliRunner

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
#: The command that writes docs/cli.md; the test runs the same generator.
REGENERATE = ["vitprune.cli", "utils", "docs", "--name", "vitprune", "--title", "Command reference"]


def test_cli_reference_is_up_to_date(tmp_path):
    from typer.cli import app as typer_cli

    result = CliRunner().invoke(typer_cli, [*REGENERATE, "--output", str(tmp_path / "cli.md")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "cli.md").read_text() == REFERENCE.read_text(), (
        f"docs/cli.md is out of date: regenerate it with `typer {shlex.join(REGENERATE)} --output docs/cli.md`")
