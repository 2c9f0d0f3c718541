"""``vitprune analyze``: each analysis writes its JSON (naming the starting checkpoint) and a PNG; clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_cli import assert_one_line_error, run

import vitprune


@pytest.fixture()
def small_saved(tmp_path):
    return vitprune.save(vitprune.create_model("digits-vit", depth=2), tmp_path / "small")


def _outputs(directory, name: str) -> dict:
    assert (directory / f"{name}.png").read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in directory.iterdir()) == [f"{name}.json", f"{name}.png"]
    return json.loads((directory / f"{name}.json").read_text())


@pytest.mark.slow
def test_gradient_disparity_writes_json_and_plot(capsys, tmp_path, small_saved):
    out = tmp_path / "gd"
    code, stdout, _ = run(capsys, "analyze", "gradient-disparity", str(small_saved), "--data", "digits",
                          "--out", str(out), "--batches", "2", "--batch-size", "16", "--identity", "skip", "--json")
    assert code == 0
    document = _outputs(out, "gradient_disparity")
    assert json.loads(stdout) == document
    assert document["model"] == str(small_saved) and document["data"] == "digits"
    assert (document["batch_size"], document["max_batches"], document["identity"]) == (16, 2, "skip")
    assert (document["batches"], document["images"]) == (2, 32)
    assert set(document["attention"]) == set(document["activation"]) == {"0", "1"}

    code, stdout, _ = run(capsys, "analyze", "gradient-disparity", str(small_saved), "--data", "digits",
                          "--out", str(out), "--batches", "1", "--overwrite")
    assert code == 0 and "activation / attention" in stdout and "starting checkpoint" in stdout
    assert _outputs(out, "gradient_disparity")["max_batches"] == 1  # replaced, with no stray temporary files


@pytest.mark.slow
def test_recovery_writes_json_and_plot(capsys, tmp_path, small_saved):
    out = tmp_path / "rec"
    code, stdout, _ = run(capsys, "analyze", "recovery", str(small_saved), "--data", "digits", "--out", str(out),
                          "--layers", "attention:1", "--layers", "activation:0", "--epochs", "1",
                          "--batch-size", "128", "--lr", "1e-3", "--json")
    assert code == 0
    document = _outputs(out, "recovery")
    assert json.loads(stdout) == document
    assert document["model"] == str(small_saved) and document["identity"] == "norm"
    assert (document["config"]["epochs"], document["config"]["lr"], document["config"]["batch_size"]) == (1, 1e-3, 128)
    assert [(r["type"], r["block"]) for r in document["layers"]] == [("attention", 1), ("activation", 0)]
    assert all(0 <= r[k] <= 1 for r in document["layers"] for k in ("top1_pruned", "top1_finetuned"))


@pytest.mark.parametrize("layers, pattern", [
    ("attention3", r"bad --layers entry 'attention3': expected TYPE:BLOCK"),
    ("attention:3,:1", r"bad --layers entry ':1'"),
    ("mlp:0", r"unknown layer type 'mlp' \(choose from: attention, activation\)"),
    ("activation:7", r"activation index 7 is out of range: the model has 2 blocks"),
], ids=["no-colon", "no-type", "unknown-type", "out-of-range"])
def test_bad_layers_are_one_line(capsys, tmp_path, small_saved, layers, pattern):
    code, _, err = run(capsys, "analyze", "recovery", str(small_saved), "--data", "digits", "--out",
                       str(tmp_path / "r"), "--layers", layers)
    assert_one_line_error(code, err, pattern)
    assert code == 2 and not (tmp_path / "r").exists()


@pytest.mark.cli
@pytest.mark.slow
def test_console_script_bad_layers(tmp_path):
    """The installed entry point, in a real process: one line on stderr, exit 2, nothing on stdout."""
    exe = os.path.join(os.path.dirname(sys.executable), "vitprune")
    result = subprocess.run([exe, "analyze", "recovery", "digits-vit", "--data", "digits", "--out", str(tmp_path),
                             "--layers", "attention-3"], capture_output=True, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("error: bad --layers entry 'attention-3': expected TYPE:BLOCK, "
                             "e.g. attention:3 or activation:5\n")
