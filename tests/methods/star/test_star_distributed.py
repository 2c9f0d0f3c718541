"""STAR under torchrun: 2 CPU processes (gloo), each over its share of the images, give 1 process's ACS and prior."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _star_dist_worker import SPEED, STAR, setting, statistics
from conftest import max_diff, run_torchrun
from safetensors.torch import load_file

from vitprune.atomic import read_json
from vitprune.methods.star.pipeline import ACS_FILE, INTER_FILE, MODEL_DIR, REPORT_FILE, SCHEDULE_FILE, run_star
from vitprune.runs import MethodData, RunContext
from vitprune.runs.stages import START_FILE


@pytest.mark.slow
def test_two_processes_shard_the_images_and_reduce_to_one_process_values(tmp_path):
    run_torchrun(Path(__file__).with_name("_star_dist_worker.py"), str(tmp_path), timeout=240)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    model, calibration, val = setting()
    single = statistics(model, calibration, None)
    report = run_star(model, MethodData(calibration, val, calibration), STAR,
                      RunContext(tmp_path / "single", speed=SPEED))
    prior = load_file(str(tmp_path / "single" / INTER_FILE))["inter"]
    for rank in ranks:
        # The functions themselves: sums over each shard, reduced, then divided by the global count.
        assert max_diff(rank["acs"], single["acs"]) <= 1e-6
        assert rank["scores"].shape == single["scores"].shape
        assert max_diff(rank["scores"], single["scores"]) <= 1e-6
        # The pipeline: every rank schedules and prunes with the values one process gets.
        assert max_diff(rank["report"]["acs"], report.acs) <= 1e-6
        assert rank["report"]["rho"] == report.rho
        assert rank["report"]["keep_rates"] == report.keep_rates
        first, again = rank["applied"]
        assert first["rates"] == again["rates"] == report.keep_rates
        assert max_diff(first["prior"], prior) <= 1e-6
        # Resumed: the values rank 0 saved, read by rank 0 and sent to rank 1.
        assert torch.equal(again["prior"], first["prior"]) and rank["resumed_acs"] == rank["report"]["acs"]
    # Only rank 0 writes, and what it wrote is what every rank used.
    assert ranks[0]["written"] == sorted([ACS_FILE, INTER_FILE, SCHEDULE_FILE, MODEL_DIR, REPORT_FILE, START_FILE])
    assert ranks[1]["written"] == []
    assert read_json(tmp_path / "run0" / ACS_FILE) == ranks[1]["report"]["acs"]
    assert torch.equal(load_file(str(tmp_path / "run0" / INTER_FILE))["inter"], ranks[1]["applied"][0]["prior"])
    assert ranks[0]["acs"] == ranks[1]["acs"] and torch.equal(ranks[0]["scores"], ranks[1]["scores"])
