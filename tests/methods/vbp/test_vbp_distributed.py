"""VBP and depth pruning under torchrun: 2 CPU processes (gloo) give what 1 process gives, and only rank 0 writes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _vbp_dist_worker import DEPTH, DEPTH_SPEED, SPEED, VBP, scores, setting, spies
from conftest import max_diff, run_torchrun

from vitprune.methods.depth import run_depth
from vitprune.methods.vbp import pipeline
from vitprune.methods.vbp.pipeline import (
    FINETUNE_DIR,
    MODEL_DIR,
    REPORT_FILE,
    SELECTION_FILE,
    STATISTICS_FILE,
    load_statistics,
)
from vitprune.runs import MethodData, RunContext
from vitprune.runs.stages import START_FILE


def _stats_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys() and all(a[k][0] == b[k][0] for k in a)  # the same sample counts
    return max(max(max_diff(a[k][1], b[k][1]), max_diff(a[k][2], b[k][2])) for k in a)


def _shared(report: dict) -> dict:
    """What every rank's report must agree on: all but its wall times and the run directory the test gave it."""
    return {k: v for k, v in report.items() if k not in ("seconds", "model_dir", "out")}


@pytest.mark.slow
def test_two_processes_prune_and_finetune_as_one_and_only_rank_0_writes(tmp_path, monkeypatch):
    run_torchrun(Path(__file__).with_name("_vbp_dist_worker.py"), str(tmp_path), timeout=300)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    model, calibration, train, val = setting()
    single = scores(model, calibration, None)
    runs: list[dict] = []
    for name, fn in spies(runs).items():
        monkeypatch.setattr(pipeline, name, fn)
    report = pipeline.run_vbp(model, MethodData(train, val, calibration), VBP,
                              RunContext(tmp_path / "single", speed=SPEED))
    (one,) = runs
    for rank in ranks:
        # The criteria themselves: per-rank moments merged, SNIP's gradients summed over the ranks.
        for criterion, values in single.items():
            assert max_diff(rank[criterion], values) <= 1e-6, criterion
        first, again = rank["runs"]
        # The pipeline: the statistics one process gets, hence its selection and its pruned weights...
        assert first["removed"] == one["removed"]
        assert _stats_diff(first["stats"], one["stats"]) <= 1e-6
        assert max_diff(first["pruned"], one["pruned"]) <= 1e-6
        # ...and one data-parallel SGD step of global batch 8 ends where one process's does.
        assert max_diff(first["recovered"], one["recovered"]) <= 1e-5
        assert max_diff(first["recovered"], first["pruned"]) > 1e-3  # the step did move the weights
        assert {k: rank["report"][k] for k in ("removed", "widths")} == {"removed": report.removed,
                                                                        "widths": report.widths}
        # Resumed: the statistics and selection rank 0 saved, read by rank 0 and sent to rank 1.
        assert again["removed"] == first["removed"]
        assert all(torch.equal(again["stats"][b][i], first["stats"][b][i]) for b in first["stats"] for i in (1, 2))
        assert all(torch.equal(again["pruned"][k], v) for k, v in first["pruned"].items())
    # Every rank holds the same statistics, weights and report.
    for key in ("variance", "pre-variance", "snip"):
        assert all(torch.equal(ranks[0][key][b], ranks[1][key][b]) for b in ranks[0][key])
    assert all(torch.equal(v, ranks[1]["runs"][0]["recovered"][k]) for k, v in ranks[0]["runs"][0]["recovered"].items())
    assert _shared(ranks[0]["report"]) == _shared(ranks[1]["report"])
    assert _shared(ranks[0]["resumed"]) == _shared(ranks[1]["resumed"])
    # Only rank 0 writes, and what it wrote is what every rank used.
    assert ranks[0]["written"] == sorted([STATISTICS_FILE, SELECTION_FILE, FINETUNE_DIR, MODEL_DIR, REPORT_FILE,
                                          START_FILE])
    assert ranks[1]["written"] is None and not (tmp_path / "run1").exists()
    saved = load_statistics(tmp_path / "run0" / STATISTICS_FILE)
    assert all(torch.equal(saved[b].var, ranks[1]["runs"][0]["stats"][b][2]) for b in saved)
    assert all(torch.equal(v, ranks[1]["runs"][0]["recovered"][k]) for k, v in ranks[0]["saved"].items())
    # run_depth: rank 0 saves and times, and every rank reports its figures.
    assert _shared(ranks[0]["depth"]) == _shared(ranks[1]["depth"])
    assert ranks[0]["depth"]["speed"]["pairs"] == DEPTH_SPEED.pairs
    assert (tmp_path / "depth0").is_dir() and not (tmp_path / "depth1").exists()
    alone = run_depth(model, MethodData(), DEPTH, RunContext(tmp_path / "depth", speed=SPEED)).to_dict()
    assert {**_shared(ranks[0]["depth"]), "speed": None} == _shared(alone)
