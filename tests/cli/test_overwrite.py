"""Commands that save or export refuse an existing target unless --overwrite, and leave it byte for byte as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_cli import assert_one_line_error, run

import vitprune


def _contents(path: Path) -> dict[str, bytes]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): p.read_bytes() for p in files}


def _command(name: str, tmp_path: Path) -> tuple[list[str], Path]:
    if name == "depth":
        target = tmp_path / "depth"
        return ["prune", "depth", "digits-vit", "--no-pretrained", "--attention", "1", "--no-speed", "--out",
                str(target)], target
    if name == "width":
        pytest.importorskip("torch_pruning")
        target = tmp_path / "width"
        return ["prune", "width", "digits-vit", "--no-pretrained", "--ratio", "0.3", "--no-speed", "--out",
                str(target)], target
    pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    vitprune.save(vitprune.create_model("digits-vit", depth=2), tmp_path / "model")
    target = tmp_path / "model.onnx"
    return ["export", str(tmp_path / "model"), "--onnx", str(target)], target


@pytest.mark.parametrize("name", ["depth", "width", pytest.param("export", marks=pytest.mark.slow)])  # ONNX: ~4 s
def test_an_existing_target_is_refused_unless_overwrite(capsys, tmp_path, name):
    argv, target = _command(name, tmp_path)
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    before = _contents(target)
    code, _, err = run(capsys, *argv)
    assert_one_line_error(code, err, f"{target} already exists; pass --overwrite to replace it")
    assert _contents(target) == before
    code, _, err = run(capsys, *argv, "--overwrite")
    assert code == 0, err
    assert target.exists()
