"""The ToMe pipeline end to end on a small model: the schedule, a MAC target, the report, the saved model."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from conftest import quick_context

import vitprune
from vitprune.data import build_dataset, build_loader
from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.measure import MacTarget, count_macs
from vitprune.methods.tome import apply_merging, r_schedule
from vitprune.methods.tome.pipeline import MODEL_DIR, REPORT_FILE, SCHEDULE_FILE, ToMeConfig, run_tome
from vitprune.runs import MethodData
from vitprune.surgery import prune_tokens, token_ops
from vitprune.training import evaluate


@pytest.fixture(scope="module")
def setting():
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=4)
    size = vitprune.get_adapter(model).input_size
    return model, MethodData(*(build_dataset("digits", split, input_size=size) for split in ("train", "val")))


def test_the_schedule_is_tomes():
    # The note's (16, -1) on twelve blocks: the paper's decreasing schedule, truncated as ToMe's parse_r does.
    assert r_schedule(16, -1, 12) == [32, 29, 26, 23, 20, 17, 14, 11, 8, 5, 2, 0]
    assert r_schedule(7, 0, 12) == [7] * 12 and r_schedule(4, 1, 3) == [0, 4, 8]


def test_a_run_merges_to_the_target_and_reports_what_it_merged(setting, tmp_path):
    model, data = setting
    target = MacTarget.relative(0.7)
    report = run_tome(model, data, ToMeConfig(r=None, target_macs=target), quick_context(tmp_path))
    loaded = vitprune.load(tmp_path / MODEL_DIR)
    dense = count_macs(model).macs
    assert count_macs(loaded).macs == report.pruned["macs_full"] <= 0.7 * dense
    # The smallest r that reaches it: one less does not.
    assert report.r > 0 and count_macs(_merged(model, report.r - 1)).macs > 0.7 * dense
    tokens = [b.tokens for b in count_macs(loaded).blocks]
    assert report.tokens == tokens and [a - b for a, b in zip(tokens, tokens[1:])] == report.merged[:-1]
    assert {i: op.r for i, op in token_ops(loaded).items()} == dict.fromkeys(range(4), report.r)
    assert report.top1["pruned"] == evaluate(loaded, build_loader(data.val, 64, shuffle=False, seed=0))["top1"]
    saved = json.loads((tmp_path / SCHEDULE_FILE).read_text())
    assert saved["r"] == report.r and saved["merged"] == report.merged
    assert json.loads((tmp_path / REPORT_FILE).read_text())["r"] == report.r


def _merged(model, r):
    scratch = copy.deepcopy(model)
    apply_merging(scratch, [r] * len(vitprune.get_adapter(scratch).blocks()))
    return scratch


def test_mistakes_are_one_line(setting, tmp_path):
    model, data = setting
    with pytest.raises(VitpruneError, match="give exactly one of r and target_macs"):
        run_tome(model, data, ToMeConfig(r=None), quick_context(tmp_path / "a"))
    with pytest.raises(VitpruneError, match=r"inflect must be in \[-1, 1\], got 2"):
        run_tome(model, data, ToMeConfig(inflect=2), quick_context(tmp_path / "b"))
    with pytest.raises(VitpruneError, match="cannot reach"):
        run_tome(model, data, ToMeConfig(r=None, target_macs=MacTarget.relative(0.01)), quick_context(tmp_path / "c"))
    star = copy.deepcopy(model)
    prune_tokens(star, 1, 0.5)
    with pytest.raises(UnsupportedArchitectureError, match=r"blocks \[1\] prune tokens \(STAR\)"):
        run_tome(star, data, ToMeConfig(), quick_context(tmp_path / "d"))
