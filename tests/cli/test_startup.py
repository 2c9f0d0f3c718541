"""``vitprune --help`` and ``--version`` start without torch: the command line is built from configs that import no
torch, and the commands import what they use when they run (benchmarks/startup.py times it)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest
import torch
from typer.testing import CliRunner

from vitprune import __version__
from vitprune.cli import app

#: What the help must not load: seconds of CPU between them.
HEAVY = ("torch", "timm", "numpy")

#: A fresh interpreter imports the command line and runs it with its arguments, if any; its last line lists the heavy
#: packages then loaded.
_PROBE = f"""
import sys
import vitprune.cli
if sys.argv[1:]:
    try:
        vitprune.cli.main(sys.argv[1:])
    except SystemExit as exc:
        assert not exc.code, exc.code
print(sorted({{name.split(".")[0] for name in sys.modules}} & {set(HEAVY)!r}))
"""


@pytest.mark.parametrize("args", [[], ["--help"], ["--version"], ["prune", "vbp", "--help"]],
                         ids=["import", "help", "version", "prune-vbp-help"])
def test_the_command_line_starts_without_torch(args):
    result = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines()[-1] == "[]"


def test_version_names_vitprune_and_torch():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    # The installed distribution's version: the torch imported here, without its build's local label (+cu130).
    installed = metadata.version("torch")
    assert torch.__version__.split("+")[0] == installed
    assert result.output == f"vitprune {__version__} (torch {installed})\n"
