"""docs/cli.md is typer's reference of the ``vitprune`` app as it is now, then the table of shared options."""

from __future__ import annotations

import shlex
from pathlib import Path

from typer.testing import CliRunner

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
#: The command that writes docs/cli.md; the test runs the same generator.
REGENERATE = ["vitprune.cli", "utils", "docs", "--name", "vitprune", "--title", "Command reference"]


def test_cli_reference_is_up_to_date(tmp_path):
    from typer.cli import app as typer_cli

    from vitprune.cli.reference import shared_options, to_markdown

    result = CliRunner().invoke(typer_cli, [*REGENERATE, "--output", str(tmp_path / "cli.md")])
    assert result.exit_code == 0, result.output
    expected = (tmp_path / "cli.md").read_text() + to_markdown(shared_options())
    assert expected == REFERENCE.read_text(), (
        f"docs/cli.md is out of date: regenerate it with `typer {shlex.join(REGENERATE)} --output docs/cli.md && "
        "python -m vitprune.cli.reference >> docs/cli.md`")


def test_the_shared_options_table_says_where_each_option_is():
    from vitprune.cli.reference import leaf_commands, shared_options

    rows = {row["option"]: row for row in shared_options()}
    commands = leaf_commands()
    for option in ("--pretrained", "--data-root", "--speed-batch", "--resume", "--epochs", "--seed"):
        having = {name for name, command in commands.items() if any(option in p.opts for p in command.params)}
        listed = {*rows[option]["commands"].split(", "), *rows[option]["other"].split(", ")} - {""}
        assert listed == having, option
    # One meaning of the training options on every command that trains.
    for option in ("--epochs", "--lr", "--workers", "--resume", "--speed-batch", "--data"):
        assert rows[option]["other"] == "", option
    assert {"prune vbp", "prune star", "prune hiap", "prune hetdpt", "finetune"} <= set(
        rows["--epochs"]["commands"].split(", "))
    assert rows["--repeats"]["default"] == "20" and rows["--data"]["meaning"].startswith("digits, cluttered-mnist")
