"""Speed measurement: structure and consistency of results, never absolute wall-clock figures."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import build
from torch import nn

from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.measure import compare_speed, measure_speed

# One thread: timings of tiny models on a shared 2-core machine are far steadier without OpenMP
# threads competing with other processes.
FAST = {"warmup": 1, "threads": 1}
SIZE = (3, 32, 32)


def tiny() -> nn.Module:
    return build("deit_tiny_patch16_224", {"img_size": 32, "depth": 2})


class Repeated(nn.Module):
    """The same model run ``times`` times: clearly more work per forward."""

    def __init__(self, model: nn.Module, times: int) -> None:
        super().__init__()
        self.model, self.times = model, times

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.times):
            out = self.model(x)
        return out


def test_result_is_consistent():
    model = tiny().train()
    threads = torch.get_num_threads()
    result = measure_speed(model, batch_size=2, repeats=5, **FAST)
    s = result.spread
    assert len(result.samples_ms) == 5 and all(t > 0 for t in result.samples_ms)
    assert s.min <= s.q1 <= s.median <= s.q3 <= s.max and result.latency_ms == s.median
    assert result.throughput == pytest.approx(2 / (s.median / 1e3))
    assert model.training and torch.get_num_threads() == threads

    data = json.loads(json.dumps(result.to_dict()))
    assert data["repeats"] == 5 and data["batch_size"] == 2 and data["warmup"] == 1
    ctx = data["context"]
    assert ctx["device"] == "cpu" and ctx["dtype"] == "float32" and ctx["batch_size"] == 2 and ctx["threads"] == 1
    assert ctx["device_name"] and ctx["torch"] == torch.__version__ and ctx["timm"]
    assert "ms median" in result.summary() and "img/s" in result.summary()
    assert result.other_load is None or 0 <= result.other_load <= 1


class _SeesDenormals(nn.Module):
    """Records whether a denormal survives a multiplication inside the timed forward passes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)
        self.kept: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.kept.append(bool(torch.tensor([1e-40]) * 1.0 != 0))
        return self.conv(x)


def test_cpu_timing_flushes_denormals_and_restores_the_default():
    model = _SeesDenormals()
    result = measure_speed(model, input_size=(3, 2, 2), batch_size=2, repeats=3, **FAST)
    assert model.kept and not any(model.kept), "underflowing arithmetic must not take the slow path while timed"
    assert result.context.flush_denormal is True
    assert bool(torch.tensor([1e-40]) * 1.0 != 0), "the process's default is back afterwards"


def test_self_comparison_is_near_one():
    model = tiny()
    comparison = compare_speed(model, model, pairs=6, **FAST)
    assert len(comparison.ratios) == 6 == len(comparison.a.samples_ms) == len(comparison.b.samples_ms)
    pairs = zip(comparison.a.samples_ms, comparison.b.samples_ms, strict=True)
    assert comparison.ratios == pytest.approx([b / a for a, b in pairs])
    assert 0.5 < comparison.speedup < 2
    data = json.loads(json.dumps(comparison.to_dict()))
    assert data["speedup"] == comparison.speedup and data["pairs"] == 6
    assert data["speedup_min"] <= data["speedup_q1"] <= data["speedup"] <= data["speedup_q3"] <= data["speedup_max"]


def test_comparison_orders_by_work():
    model = tiny()
    heavy = Repeated(model, 8)
    # speedup = time(B) / time(A): > 1 when A does less work.
    assert compare_speed(model, heavy, input_size=SIZE, pairs=4, **FAST).speedup > 1.5
    assert compare_speed(heavy, model, input_size=SIZE, pairs=4, **FAST).speedup < 1 / 1.5


def test_bfloat16_on_cpu():
    result = measure_speed(tiny(), dtype=torch.bfloat16, repeats=2, **FAST)
    assert result.context.dtype == "bfloat16"


def test_user_errors():
    model = tiny()
    with pytest.raises(UnsupportedArchitectureError):
        measure_speed(Repeated(model, 2), repeats=1)
    with pytest.raises(VitpruneError, match="device"):
        measure_speed(model, device="tpu", repeats=1)
    with pytest.raises(VitpruneError, match="repeats"):
        measure_speed(model, repeats=0)
    with pytest.raises(VitpruneError, match="threads"):
        measure_speed(model, repeats=1, threads=0)
    other = build("deit_tiny_patch16_224", {"img_size": 48, "depth": 1})
    with pytest.raises(VitpruneError, match="different inputs: 3x32x32 vs 3x48x48"):
        compare_speed(model, other, pairs=1)
    if not torch.cuda.is_available():
        with pytest.raises(VitpruneError, match="CUDA is not available"):
            measure_speed(model, device="cuda", repeats=1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_timing():
    model = tiny()
    result = measure_speed(model, device="cuda", repeats=3, warmup=1)
    assert result.context.device.startswith("cuda") and result.context.cuda and len(result.samples_ms) == 3
    assert 0.5 < compare_speed(model, model, device="cuda", pairs=4, warmup=1).speedup < 2
