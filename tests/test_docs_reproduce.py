"""docs/reproduce.md: its wall-time table is what ``benchmarks/stage_times.py`` makes of the committed results, and
the fine-tune it spells out for a known layer set is the ``imagenet-hetdpt`` preset, flag for flag."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import typer
from conftest import benchmark_module

from vitprune.cli import app
from vitprune.training.presets import get_preset

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reproduce.md"
RESULTS = ROOT / "benchmarks" / "results"


def test_the_wall_time_table_is_generated_from_the_results():
    stage_times = benchmark_module("stage_times")
    report = stage_times.estimate(json.loads((RESULTS / "train_throughput_cuda.json").read_text()),
                                  json.loads((RESULTS / "structural_cpu.json").read_text()))
    page = PAGE.read_text()
    assert stage_times.embed(page, stage_times.to_markdown(report)) == page
    assert json.loads((RESULTS / "stage_times.json").read_text()) == json.loads(json.dumps(report))


def _finetune_command(page: str) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", page, flags=re.S)
    commands = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    (command,) = [c for c in commands if " -m vitprune finetune " in c]
    words = shlex.split(command)
    return words[words.index("finetune") + 1:]


def test_the_spelt_out_fine_tune_is_the_hetdpt_preset():
    finetune = typer.main.get_command(app).commands["finetune"]
    params = finetune.make_context("finetune", _finetune_command(PAGE.read_text())).params
    preset = get_preset("imagenet-hetdpt")
    for name, value in vars(preset.train).items():
        if name == "workers":  # the machine's, not the recipe's
            continue
        assert params[name] == value, name
    assert (params["distill"], params["alpha"], params["tau"]) == (
        preset.distill.distill, preset.distill.alpha, preset.distill.tau)
