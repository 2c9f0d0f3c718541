"""ONNX export: pruned models of several architectures match PyTorch in onnxruntime at any batch; what cannot be
exported (a-STAR) or does not check out is refused and leaves no file; onnxruntime runs under the speed tools."""

from __future__ import annotations

import pytest
import torch
from conftest import digits_chain, shallow, tracked

import vitprune
from vitprune.errors import VitpruneError
from vitprune.export import OnnxRuntimeModel, export_onnx
from vitprune.measure import compare_speed
from vitprune.surgery import prune_depth, prune_tokens

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


def _outputs(path, x):
    return OnnxRuntimeModel(path)(x)


@pytest.mark.slow
def test_depth_pruned_models_of_every_family_match_pytorch_at_any_batch(small_model_spec, tmp_path):
    name, kwargs = small_model_spec
    model = tracked(name, shallow(name, kwargs, 3))
    attention = [0] if "attention_removal" in vitprune.get_adapter(model).capabilities else []
    prune_depth(model, attention=attention, activation=[1, 2])
    result = export_onnx(model, tmp_path / "m.onnx")
    assert result.max_abs_diff <= 1e-4 and result.dynamic_batch and result.check_batch == 2
    for batch in (1, 3):
        x = torch.randn(batch, *vitprune.get_adapter(model).input_size)
        with torch.no_grad():
            torch.testing.assert_close(_outputs(tmp_path / "m.onnx", x), model(x), rtol=0, atol=1e-4)


def test_a_static_export_and_a_chain_with_token_pruning(tmp_path):
    model = digits_chain()
    result = export_onnx(model, tmp_path / "s.onnx", dynamic_batch=False, check_batch=3)
    assert not result.dynamic_batch and result.input_size == (1, 32, 32)
    x = torch.randn(3, 1, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(_outputs(tmp_path / "s.onnx", x), model(x), rtol=0, atol=1e-4)
    with pytest.raises(Exception, match="(?i)dimension|shape"):  # a static file takes its own batch only
        _outputs(tmp_path / "s.onnx", torch.randn(2, 1, 32, 32))


@pytest.mark.slow
def test_what_cannot_be_exported_leaves_no_file(tmp_path, monkeypatch):
    model = digits_chain()
    prune_tokens(model, 3, 0.7, adaptive=True)
    with pytest.raises(VitpruneError, match=r"cannot export to ONNX: blocks.3 keeps a per-image number of tokens"):
        export_onnx(model, tmp_path / "a.onnx")
    with pytest.raises(VitpruneError, match=r"differ from PyTorch's by .* \(> 1e-12\); .*b.onnx was not written"):
        export_onnx(digits_chain(), tmp_path / "b.onnx", atol=1e-12)
    monkeypatch.setattr("vitprune.export.onnx_missing", lambda: "ONNX export needs the onnx extra")
    with pytest.raises(VitpruneError, match=r"pip install 'vitprune\[onnx\]'"):
        export_onnx(digits_chain(), tmp_path / "c.onnx")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_onnxruntime_runs_under_the_paired_timing(tmp_path):
    model = digits_chain()
    export_onnx(model, tmp_path / "m.onnx")
    comparison = compare_speed(OnnxRuntimeModel(tmp_path / "m.onnx", threads=1), model, input_size=(1, 32, 32),
                               batch_size=2, pairs=3, warmup=1, threads=1)
    assert len(comparison.ratios) == 3 and all(r > 0 for r in comparison.ratios)
