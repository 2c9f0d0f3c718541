"""``vitprune compare`` from the command line: the command it prints for an arm runs that arm alone and gives the same
model, bit for bit, whatever the seed and the training subset."""

from __future__ import annotations

import json
import shlex

import pytest
import torch
from test_cli import run

import vitprune

pytest.importorskip("torch_pruning")


@pytest.mark.slow
def test_the_printed_command_reproduces_the_arm_bit_for_bit(capsys, tmp_path, monkeypatch):
    """Seed 1 and a 300-image training subset: every step the comparison ran carries its seed, its chain file the
    subset, and the command names the model's weights (--no-pretrained --seed 1) and the data."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "compare", "digits-vit", "--no-pretrained", "--seed", "1", "--data", "digits",
                         "--target-macs", "0.6", "--arms", "vbp", "--train-images", "300", "--no-speed", "--json",
                         "--out", "compared")
    assert code == 0, err
    report = json.loads(out)
    best = report["pick"]["macs-0.6"]
    assert best["arm"] == "vbp"
    words = shlex.split(best["command"])
    assert words[:7] == ["vitprune", "chain", "digits-vit", "--no-pretrained", "--seed", "1", "--data"]
    arm = tmp_path / "compared" / "arms" / "macs-0.6" / "vbp" / "seed-1"
    chain = json.loads((arm / "chain.json").read_text())
    assert chain["seed"] == 1 and chain["train_images"] == 300
    assert [step["seed"] for step in chain["steps"]] == [1, 1]  # vbp's calibration draw, the recovery's training
    code, _, err = run(capsys, *words[1:], "--no-speed", "--no-onnx", "--json")
    assert code == 0, err
    alone, compared = (vitprune.load(path).state_dict() for path in (tmp_path / words[-1] / "model", arm / "model"))
    assert alone.keys() == compared.keys() and all(torch.equal(alone[k], compared[k]) for k in alone)
