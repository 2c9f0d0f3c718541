"""The HiAP pipeline under torchrun: 2 CPU processes (gloo) with the same global batch extract the model 1 process
does; rank 0 alone writes the run, and a finished run resumes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _hiap_dist_worker import HIAP, SPEED, TRAIN, setting
from conftest import max_diff, run_torchrun
from safetensors.torch import load_file

import vitprune
from vitprune.methods.hiap import HiAPRun
from vitprune.methods.hiap.pipeline import GATES_FILE, MODEL_DIR, PLOT_FILE, REPORT_FILE, SEARCH_DIR, run_hiap
from vitprune.runs import MethodData, RunContext
from vitprune.runs.stages import START_FILE


@pytest.mark.slow
def test_two_processes_train_and_extract_what_one_process_does_and_rank_0_writes(tmp_path):
    run_torchrun(Path(__file__).with_name("_hiap_dist_worker.py"), str(tmp_path), timeout=300)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    model, train, val = setting()
    single = run_hiap(model, MethodData(train, val), HiAPRun(TRAIN, HIAP),
                      RunContext(tmp_path / "single", speed=SPEED)).to_dict()
    gates = {d: load_file(str(tmp_path / d / GATES_FILE)) for d in ("single", "run0")}
    # The gates moved in two steps (closing heads that extraction cut out), and the two processes moved them (and the
    # weights) as one process does.
    assert max(float((g - HIAP.gate_init).abs().max()) for g in gates["single"].values()) > 1e-3
    assert single["heads"] < sum(layer["heads_of"] for layer in single["layers"])
    assert max_diff(gates["run0"], gates["single"]) <= 1e-5
    models = {d: vitprune.load(tmp_path / d / MODEL_DIR).state_dict() for d in ("single", "run0")}
    assert max_diff(models["run0"], models["single"]) <= 1e-5
    for rank in ranks:
        report = rank["report"]
        for got, want in zip(report["layers"], single["layers"], strict=True):
            expected = [k for k in want if k.startswith("expected_")]
            assert {k: v for k, v in got.items() if k not in expected} == {k: v for k, v in want.items()
                                                                            if k not in expected}
            assert [got[k] for k in expected] == pytest.approx([want[k] for k in expected], rel=1e-5)
        assert report["top1"] == pytest.approx(single["top1"], abs=1e-9)
        assert report["pruned"] == single["pruned"] and report["macs_predicted"] == single["macs_predicted"]
        assert [h["step"] for h in report["history"]] == [h["step"] for h in single["history"]] == [2]
        # Resumed from the finished checkpoint: nothing retrained, the same extraction; the history from rank 0.
        resumed = rank["resumed"]
        assert resumed["layers"] == report["layers"] and resumed["top1"] == report["top1"]
        assert resumed["history"] == ranks[0]["report"]["history"]
    assert ranks[0]["written"] == sorted([SEARCH_DIR, GATES_FILE, MODEL_DIR, PLOT_FILE, REPORT_FILE, START_FILE])
    assert ranks[1]["written"] is None
