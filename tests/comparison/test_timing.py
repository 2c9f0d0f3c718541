"""An arm's final model timed as deployed: every runtime and batch asked for against the dense model, its memory,
and one line for a runtime or dtype that cannot run here."""

from __future__ import annotations

import copy

import pytest
import torch

import vitprune
from vitprune.comparison.timing import check_timing, time_deployed
from vitprune.errors import VitpruneError
from vitprune.measure import SpeedConfig
from vitprune.surgery import prune_mlp_neurons

SPEED = SpeedConfig(batch_size=4, pairs=3, warmup=1)


def _pair():
    torch.manual_seed(0)
    dense = vitprune.create_model("digits-vit", depth=2, patch_size=8).eval()
    arm = copy.deepcopy(dense)
    for block in range(2):
        prune_mlp_neurons(arm, block, list(range(16)))
    return arm, dense


def _check_rows(rows, expected):
    assert [(r["runtime"], r["batch"], r["dtype"]) for r in rows] == expected
    for row in rows:
        assert row["speedup_q1"] <= row["speedup"] <= row["speedup_q3"] and row["ms"] > 0 and row["dense_ms"] > 0


def test_each_batch_is_a_row_against_the_dense_model():
    arm, dense = _pair()
    deployed = time_deployed(arm, dense, batches=[1, 4], runtimes=["torch"], dtype="float32", speed=SPEED,
                             device=torch.device("cpu"))
    _check_rows(deployed["timings"], [("torch", 1, "float32"), ("torch", 4, "float32")])
    params = sum(p.numel() for p in [*arm.parameters(), *arm.buffers()])
    assert deployed["memory"] == {"weights_bytes": 4 * params, "peak_bytes": None, "peak_batch": None}
    # The models handed in are not moved or changed.
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in arm.parameters())


@pytest.mark.slow
def test_onnxruntime_times_the_checked_exports():
    pytest.importorskip("onnxruntime")
    arm, dense = _pair()
    deployed = time_deployed(arm, dense, batches=[1, 4], runtimes=["torch", "onnxruntime"], dtype="float32",
                             speed=SPEED, device=torch.device("cpu"))
    _check_rows(deployed["timings"], [("torch", 1, "float32"), ("torch", 4, "float32"), ("onnxruntime", 1, "float32"),
                                      ("onnxruntime", 4, "float32")])


def test_bfloat16_halves_the_weights_and_times_in_it():
    torch.manual_seed(0)
    dense = vitprune.create_model("digits-vit", depth=1, patch_size=8).eval()
    deployed = time_deployed(dense, dense, batches=[2], runtimes=["torch"], dtype="bfloat16", speed=SPEED,
                             device=torch.device("cpu"))
    params = sum(p.numel() for p in [*dense.parameters(), *dense.buffers()])
    assert deployed["timings"][0]["dtype"] == "bfloat16" and deployed["memory"]["weights_bytes"] == 2 * params


@pytest.mark.parametrize("runtimes, dtype, message", [
    (["tensorrt"], "float32", "unknown runtime 'tensorrt'"),
    (["torch"], "int8", "unknown dtype 'int8'"),
    (["torch"], "float16", "float16 timing needs a CUDA device"),
])
def test_what_cannot_run_here_is_one_line(runtimes, dtype, message):
    with pytest.raises(VitpruneError, match=message):
        check_timing(runtimes, dtype, torch.device("cpu"))
