"""HiAP's search under torchrun: 2 CPU processes (gloo) with the same global batch end where 1 process does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _search_dist_worker import search
from conftest import run_torchrun


@pytest.mark.slow
def test_two_processes_train_the_gates_and_weights_one_process_does(tmp_path):
    run_torchrun(Path(__file__).with_name("_search_dist_worker.py"), str(tmp_path / "out.pt"), timeout=240)
    two = torch.load(tmp_path / "out.pt", weights_only=False)
    one = search()
    assert [h["step"] for h in two["history"]] == [h["step"] for h in one["history"]] == [2]
    assert two["history"][0]["loss"] == pytest.approx(one["history"][0]["loss"], abs=1e-5)
    assert two["gates"].keys() == one["gates"].keys() and two["model"].keys() == one["model"].keys()
    for part in ("gates", "model"):
        for name, value in one[part].items():
            assert (two[part][name] - value).abs().max() <= 1e-5, (part, name)
    # The gates did move: a step that changed nothing would pass the comparison trivially.
    assert any((g - 0.5).abs().max() > 1e-3 for g in one["gates"].values())
