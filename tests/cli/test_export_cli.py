"""``vitprune export``: a saved pruned model to ONNX, checked and timed against PyTorch; a-STAR refused in one line."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import digits_chain
from test_cli import assert_one_line_error, run

import vitprune
from vitprune.export import OnnxRuntimeModel
from vitprune.surgery import prune_tokens

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


@pytest.mark.slow
def test_export_command(capsys, tmp_path):
    vitprune.save(digits_chain(), tmp_path / "pruned")
    code, out, _ = run(capsys, "export", str(tmp_path / "pruned"), "--onnx", str(tmp_path / "p.onnx"),
                       "--speed-batch", "2", "--repeats", "3", "--threads", "1", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["max_abs_diff"] <= 1e-4 and report["dynamic_batch"] and report["speed_vs_pytorch"]["pairs"] == 3
    assert report["speed_vs_pytorch"]["a"]["batch_size"] == 2
    x = torch.randn(2, 1, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(OnnxRuntimeModel(tmp_path / "p.onnx")(x), vitprune.load(tmp_path / "pruned")(x),
                                   rtol=0, atol=1e-4)
    adaptive = digits_chain()
    prune_tokens(adaptive, 3, 0.7, adaptive=True)
    vitprune.save(adaptive, tmp_path / "adaptive")
    code, _, err = run(capsys, "export", str(tmp_path / "adaptive"), "--onnx", str(tmp_path / "a.onnx"))
    assert_one_line_error(code, err, r"cannot export to ONNX: blocks.3 keeps a per-image number of tokens \(a-STAR\)")
