"""The command line: JSON outputs carry the promised fields, and every user mistake is one line + non-zero exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitprune
from vitprune.cli import main
from vitprune.measure import SpeedConfig, count_macs
from vitprune.surgery import prune_mlp_neurons


#: The classes of :func:`image_folder`.
CLASSES = ("cat", "dog", "fox")


def image_folder(root: Path) -> Path:
    """An ImageFolder of three classes under ``root``, 6 training and 3 validation images each, 40x40 RGB: a new
    user's own images."""
    rng = np.random.default_rng(0)
    for split, count in (("train", 6), ("val", 3)):
        for label, name in enumerate(CLASSES):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (40, 40, 3)) // 2 + 40 * label  # each class a tint of its own
                Image.fromarray(pixels.astype(np.uint8)).save(root / split / name / f"{i}.png")
    return root


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""
    try:
        main(list(argv))
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, pattern: str) -> None:
    import re

    assert code != 0
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got: {err!r}"
    assert lines[0].startswith("error: ") and "Traceback" not in err
    assert re.search(pattern, lines[0]), lines[0]


def test_profile_json_has_documented_fields(capsys):
    code, out, _ = run(capsys, "profile", "deit_small_patch16_224", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["convention"] == "full" and data["input_size"] == [3, 224, 224]
    assert data["macs"] == 4_241_218_560 + 12 * 2 * 6 * 197 ** 2 * 64
    assert data["params"] == 22_050_664
    code, out, _ = run(capsys, "profile", "deit_small_patch16_224", "--json", "--convention", "linear")
    assert json.loads(out)["macs"] == 4_241_218_560 and json.loads(out)["convention"] == "linear"


def test_profile_table_names_convention(capsys, monkeypatch):
    from vitprune.cli.app import console

    monkeypatch.setattr(console, "width", 200)  # tables wrap at pytest's default 80 columns
    code, out, _ = run(capsys, "profile", "digits-vit", "--convention", "linear")
    assert code == 0 and "convention 'linear'" in out and "attn matmul" not in out
    code, out, _ = run(capsys, "profile", "digits-vit")
    assert code == 0 and "convention 'full'" in out and "attn matmul" in out


def test_saved_model_profile_and_info(capsys, tmp_path):
    model = vitprune.create_model("deit_tiny_patch16_224")
    prune_mlp_neurons(model, 0, list(range(100)))
    vitprune.save(model, tmp_path / "pruned", metadata={"note": "cli test"})
    code, out, _ = run(capsys, "profile", str(tmp_path / "pruned"), "--json")
    assert code == 0 and json.loads(out)["macs"] == count_macs(model).macs
    assert json.loads(out)["blocks"][0]["mlp_hidden"] == 100
    code, out, _ = run(capsys, "info", str(tmp_path / "pruned"), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["edits"] == [{"op": "prune_mlp_neurons", "args": {"block": 0, "keep": list(range(100))}}]
    code, out, _ = run(capsys, "info", str(tmp_path / "pruned"))
    assert code == 0 and "prune_mlp_neurons" in out and "deit_tiny_patch16_224" in out and "note: cli test" in out


def test_bench_json_and_comparison(capsys, tmp_path):
    model = vitprune.create_model("digits-vit")
    for block in range(12):
        prune_mlp_neurons(model, block, [0])
    vitprune.save(model, tmp_path / "small")
    code, out, _ = run(capsys, "bench", "digits-vit", "--json", "--repeats", "3", "--warmup", "1")
    data = json.loads(out)
    assert code == 0 and data["repeats"] == 3 and data["batch_size"] == SpeedConfig().batch_size
    assert data["min_ms"] <= data["median_ms"] <= data["max_ms"]
    assert data["context"]["dtype"] == "float32" and data["context"]["device"] == "cpu"
    code, out, _ = run(capsys, "bench", str(tmp_path / "small"), "--vs", "digits-vit", "--json",
                       "--repeats", "4", "--warmup", "1", "--speed-batch", "2")
    data = json.loads(out)
    assert code == 0 and data["pairs"] == 4 and len(data["ratios"]) == 4
    assert data["speedup"] == pytest.approx(sorted(data["ratios"])[1] / 2 + sorted(data["ratios"])[2] / 2)
    assert data["a"]["batch_size"] == 2


def test_eval_digits_untrained(capsys):
    code, out, _ = run(capsys, "eval", "digits-vit", "--no-pretrained", "--data", "digits", "--json")
    data = json.loads(out)
    assert code == 0 and data["count"] == 360 and 0.0 <= data["top1"] <= 1.0


@pytest.mark.parametrize(
    "argv, pattern",
    [
        (["profile", "deit_tiny_patch16_22"], r"unknown model 'deit_tiny_patch16_22'.*did you mean: deit_tiny_patch16_224"),
        (["profile", "resnet10t"], r"unsupported architecture: ResNet"),
        (["profile", "no/such/dir"], r"model path no/such/dir does not exist"),
        (["eval", "digits-vit", "--no-pretrained", "--data", "/no/such/data"], r"/no/such/data does not exist"),
        (["eval", "deit_tiny_patch16_224", "--data", "digits"], r"could not load pretrained weights for "
                                                                r"deit_tiny_patch16_224.*--checkpoint.*--no-pretrained"),
        (["eval", "deit_tiny_patch16_224", "--checkpoint", "/no/weights.pth", "--data", "digits"],
         r"checkpoint /no/weights.pth does not exist"),
        (["info", "/no/such/save"], r"no saved model at /no/such/save"),
        (["bench", "digits-vit", "--device", "cuda:0"], r"CUDA is not available"),
    ],
    ids=["unknown-model", "unsupported-arch", "missing-model-path", "missing-data", "offline-pretrained",
         "missing-checkpoint", "missing-save", "no-cuda"],
)
def test_user_mistakes_are_one_line(capsys, monkeypatch, argv, pattern):
    if argv[0] == "bench" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = run(capsys, *argv)
    assert_one_line_error(code, err, pattern)


def test_corrupt_and_mismatched_checkpoints(capsys, tmp_path):
    bad = tmp_path / "bad.pth"
    bad.write_bytes(b"not a checkpoint")
    code, _, err = run(capsys, "eval", "deit_tiny_patch16_224", "--checkpoint", str(bad), "--data", "digits")
    assert_one_line_error(code, err, r"cannot read checkpoint .*bad\.pth")
    wrong = tmp_path / "wrong.safetensors"
    import safetensors.torch

    safetensors.torch.save_model(vitprune.create_model("deit_small_patch16_224"), str(wrong))
    code, _, err = run(capsys, "eval", "deit_tiny_patch16_224", "--checkpoint", str(wrong), "--data", "digits")
    assert_one_line_error(code, err, r"weights in .*wrong\.safetensors do not match the architecture: .* has shape")


def test_corrupt_save(capsys, tmp_path):
    path = vitprune.save(vitprune.create_model("digits-vit"), tmp_path / "m")
    (path / "model.safetensors").write_bytes(b"junk")
    code, _, err = run(capsys, "profile", str(path))
    assert_one_line_error(code, err, r"corrupt weights file")


@pytest.mark.slow
@pytest.mark.cli
def test_console_script_exit_code_and_stderr(tmp_path):
    """The installed entry point, in a real process: one line on stderr, exit 2, nothing on stdout."""
    exe = os.path.join(os.path.dirname(sys.executable), "vitprune")
    result = subprocess.run([exe, "profile", "not_a_model"], capture_output=True, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().count("\n") == 0 and result.stderr.startswith("error: unknown model 'not_a_model'")


@pytest.mark.cli
@pytest.mark.slow
def test_gated_mlp_model_is_rejected_by_name():
    """A real timm model with a SwiGLU MLP: the error names the module and the reason."""
    exe = os.path.join(os.path.dirname(sys.executable), "vitprune")
    result = subprocess.run([exe, "profile", "aimv2_large_patch14_224"], capture_output=True, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: unsupported architecture: blocks.0.mlp is SwiGLU (only the plain fc1 -> "
                                     "activation -> fc2 MLP is supported; gated (GLU/SwiGLU) MLPs cannot be "
                                     "represented)")


@pytest.mark.parametrize("argv, message", [
    (["prune", "depth"], "Missing argument 'model'"),
    (["profile", "digits-vit", "--bogus"], "No such option: --bogus"),
], ids=["missing-argument", "unknown-option"])
def test_usage_errors_are_short_messages(capsys, argv, message):
    """typer's usage errors (its own vendored click classes) end as a usage message and exit 2, no traceback."""
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err and "Traceback" not in err
