"""Width pruning and chains under torchrun: 2 CPU processes (gloo) give what 1 process gives, and only rank 0 writes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _width_dist_worker import SPEED, STEPS, gradients, setting, width_config
from conftest import max_diff, run_torchrun

import vitprune
from vitprune.methods.width import run_width, taylor_scores
from vitprune.runs import ChainConfig, MethodData, RunContext
from vitprune.runs.chain import run_chain

pytest.importorskip("torch_pruning")


def _shared(report: dict) -> dict:
    """What every run must agree on: all but wall times and the directories the test gave it."""
    return {k: v for k, v in report.items() if k not in ("seconds", "out", "model_dir", "steps")}


def _steps(report: dict) -> list[dict]:
    return [{k: v for k, v in step.items() if k != "dir"} for step in report["steps"]]


@pytest.mark.slow
def test_two_processes_width_prune_and_chain_as_one_and_only_rank_0_writes(tmp_path):
    run_torchrun(Path(__file__).with_name("_width_dist_worker.py"), str(tmp_path), timeout=300)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    model, calibration, train, val = setting()
    grads = gradients(model, calibration, None)
    scores = taylor_scores(model, grads)
    width = run_width(model, MethodData(calibration=calibration), width_config(model), RunContext(tmp_path / "width",
                      speed=SPEED)).to_dict()
    chain = run_chain(model, MethodData(train, val, calibration), ChainConfig(STEPS, onnx=False),
                      RunContext(tmp_path / "chain-single", speed=SPEED)).to_dict()
    assert width["taylor_images"] == 60
    for rank in ranks:
        # Taylor statistics: each rank's share of the batches, gradients summed over the ranks.
        assert max_diff(rank["gradients"], grads) <= 1e-6
        assert max_diff(rank["scores"], scores) <= 1e-6
        # The same plan, hence the same model, found by the same bisection.
        assert _shared(rank["width"]) == _shared(width)
        # The chain: the same width step, and one data-parallel SGD step of global batch 8 landing where one
        # process's does.
        assert _steps(rank["chain"])[1]["summary"] == _steps(chain)[1]["summary"]
        for got, want in zip(_steps(rank["chain"]), _steps(chain)):
            assert got["params"] == want["params"] and got["macs_full"] == want["macs_full"]
            assert got["top1"] == pytest.approx(want["top1"], abs=1e-9)
        assert _steps(rank["resumed"]) == _steps(rank["chain"])
    alone = vitprune.load(tmp_path / "chain-single" / "model").state_dict()
    assert max_diff(ranks[0]["chain_weights"], alone) <= 1e-5
    assert all(torch.equal(v, ranks[1]["chain_weights"][k]) for k, v in ranks[0]["chain_weights"].items())
    # Only rank 0 writes; it wrote the width model, every step and the chain's model and report.
    assert ranks[1]["written"] == []
    written = {Path(p).relative_to(tmp_path).parts[:3] for p in ranks[0]["written"]}
    assert ("width0",) in {w[:1] for w in written} and not (tmp_path / "width1").exists()
    assert {("chain", "model"), ("chain", "report.json"), ("chain", "steps", "01-width"),
            ("chain", "steps", "02-finetune")} <= {w[:3] if w[1] == "steps" else w[:2] for w in written
                                                  if w[0] == "chain"}
