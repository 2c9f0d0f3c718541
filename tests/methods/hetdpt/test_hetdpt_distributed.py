"""HetDPT under torchrun: 2 CPU processes (gloo), each over its share of the TE images and of every training batch,
give 1 process's transfer entropy, importance scores, weights and choices; rank 0 alone writes the run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _hetdpt_dist_worker import HETDPT, SPEED, setting, statistics
from conftest import max_diff, run_torchrun

import vitprune
from vitprune.methods.hetdpt import HetDPTRun
from vitprune.methods.hetdpt.pipeline import (
    FINETUNE_DIR, MODEL_DIR, POINTS_FILE, PREDICTOR_FILE, PREDICTOR_PLOT, REPORT_FILE, SEARCH_DIR, SELECTION_FILE,
    run_hetdpt,
)
from vitprune.runs import MethodData, RunContext
from vitprune.runs.stages import START_FILE


@pytest.mark.slow
def test_two_processes_shard_the_statistics_and_training_and_reach_one_process_results(tmp_path):
    run_torchrun(Path(__file__).with_name("_hetdpt_dist_worker.py"), str(tmp_path), timeout=400)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    model, calibration, train, val = setting()
    single = statistics(model, calibration, None)
    report = run_hetdpt(model, MethodData(train, val, calibration), HetDPTRun(2, config=HETDPT),
                        RunContext(tmp_path / "single", speed=SPEED)).to_dict()
    # The search moved the scores: a step that changed nothing would pass the comparisons trivially.
    assert max(abs(v) for scores in single["importance"].values() for v in scores.values()) > 1e-4
    for rank in ranks:
        # TE: moments over each shard, merged; one Step-2 step of the same global batch: scores and weights.
        assert max_diff(rank["te"], single["te"]) <= 1e-6
        assert max_diff(rank["importance"], single["importance"]) <= 1e-5
        assert rank["removed"] == single["removed"]
        assert [(h["type"], h["block"]) for h in rank["history"]] == [(h["type"], h["block"]) for h in
                                                                      single["history"]]
        assert max_diff(rank["weights"], single["weights"]) <= 1e-5
        # The pipeline: the same points, split, shortlist and layers as one process, scores and TE within rounding.
        got = rank["report"]
        points, want = got["predictor"]["fit"]["points"], report["predictor"]["fit"]["points"]
        assert torch.tensor(points) == pytest.approx(torch.tensor(want), abs=1e-9)
        assert got["split"] == report["split"]
        assert (got["attention"], got["activation"]) == (report["attention"], report["activation"])
        assert got["selection"]["candidates"] == report["selection"]["candidates"]
        assert max_diff(got["selection"]["transfer_entropy"], report["selection"]["transfer_entropy"]) <= 1e-6
        assert max_diff(got["selection"]["importance"], report["selection"]["importance"]) <= 1e-5
        assert got["top1"] == pytest.approx(report["top1"], abs=1e-9)
        # Resumed where rank 1 has no files: every stage comes from what rank 0 saved and sent.
        resumed = rank["resumed"]
        assert resumed["predictor"]["fit"] == got["predictor"]["fit"] and resumed["split"] == got["split"]
        assert resumed["selection"] == got["selection"]
    # Stage 2 fine-tuned data-parallel to the weights one process reaches, then merged.
    single_model = vitprune.load(tmp_path / "single" / MODEL_DIR).state_dict()
    assert max_diff(ranks[0]["model"], single_model) <= 1e-5
    # Each TE pass of the pipeline (Step 1 and Step 2) gave each process its share of the 23 images.
    assert ranks[0]["shares"] == [12, 12] and ranks[1]["shares"] == [11, 11]
    # Only rank 0 writes.
    assert ranks[0]["written"] == sorted([POINTS_FILE, PREDICTOR_FILE, PREDICTOR_PLOT, SEARCH_DIR, SELECTION_FILE,
                                          FINETUNE_DIR, MODEL_DIR, REPORT_FILE, START_FILE])
    assert ranks[1]["written"] is None
