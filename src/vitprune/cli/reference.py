"""The shared options of ``vitprune``'s commands as a Markdown table: each one's single name, meaning and default, and
the commands it appears on, read from the app itself. docs/cli.md ends with it:

    typer vitprune.cli utils docs --name vitprune --title 'Command reference' --output docs/cli.md
    python -m vitprune.cli.reference >> docs/cli.md
"""

from __future__ import annotations

import dataclasses
from typing import Any

import typer

from vitprune.cli import app
from vitprune.cli.config_options import PRESET_DEFAULT
from vitprune.cli.options import (
    NUM_CLASSES_OPT, OVERWRITE_OPT, SEED_OPT, DataSource, FinetuneOptions, ModelSource, RunOutput,
)
from vitprune.config import cli_facts
from vitprune.measure import SpeedConfig

#: The groups every command that needs them takes whole, each declared once as a dataclass, in the table's order.
GROUPS = {"model source": ModelSource, "data": DataSource, "speed": SpeedConfig, "output": RunOutput,
          "fine-tune": FinetuneOptions}
#: Options shared one by one.
SINGLE = {"--seed": SEED_OPT, "--overwrite": OVERWRITE_OPT, "--num-classes": NUM_CLASSES_OPT}


def leaf_commands() -> dict[str, Any]:
    """Every command of the app by its full name (``prune vbp``), click's objects."""
    found: dict[str, Any] = {}

    def visit(command: Any, path: tuple[str, ...]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                visit(sub, (*path, name))
        else:
            found[" ".join(path)] = command

    visit(typer.main.get_command(app), ())
    return found


def shared_options() -> list[dict[str, str]]:
    """One row per shared option: its group, flag, meaning, default, the commands that take it, and those where the
    same flag means something else (``other``)."""
    commands = leaf_commands()
    rows = []

    def row(group: str, flag: str, meaning: str, default: Any) -> None:
        having = {name: param for name, command in commands.items() for param in command.params
                  if flag in param.opts}
        # A preset's change says so after its help: the meaning is the same.
        same = {name: (param.help or "").removesuffix(f"  {PRESET_DEFAULT}") == meaning
                for name, param in having.items()}
        rows.append({"group": group, "option": flag, "meaning": meaning, "default": _default(default),
                     "commands": ", ".join(name for name in having if same[name]),
                     "other": ", ".join(name for name in having if not same[name])})

    for group, cls in GROUPS.items():
        for field in dataclasses.fields(cls):
            facts = cli_facts(field)
            if facts is None:
                continue
            flag = (facts.flag or "--" + field.name.replace("_", "-")).split("/")[0]
            row(group, flag, facts.help, field.default)
    for flag, option in SINGLE.items():
        row("single", flag, option.help, option.default)
    return rows


def _default(value: Any) -> str:
    return "required" if value is ... or value is dataclasses.MISSING else "none" if value is None else str(value)


def to_markdown(rows: list[dict[str, str]]) -> str:
    """The table under its heading, as docs/cli.md ends."""
    lines = ["", "## Shared options", "",
             "Each of these options has one name, one meaning and one default on every command in its commands column "
             "(`tests/cli/test_options.py`); old spellings are hidden aliases that still work and warn. The last "
             "column names the commands where the same flag still means something else.", "",
             "| group | option | meaning | default | commands | the same flag, another meaning |",
             "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['group']} | `{r['option']}` | {r['meaning'].replace('|', '/')} | {r['default']} | "
              f"{r['commands']} | {r['other'] or '-'} |" for r in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(to_markdown(shared_options()), end="")
