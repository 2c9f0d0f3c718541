"""``run_width``: torch-pruning's plan at a ratio or to a MAC target, the pruned copy saved with its report."""

from __future__ import annotations

import copy

import pytest
import torch
from reports import assert_saved

import vitprune
from vitprune.data import balanced_subset, build_dataset
from vitprune.errors import VitpruneError
from vitprune.measure import SpeedConfig, count_macs
from vitprune.methods.width import WidthConfig, prune_width, run_width
from vitprune.methods.width.pipeline import METADATA_KEY

pytest.importorskip("torch_pruning")

NO_SPEED = SpeedConfig(enabled=False)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return vitprune.create_model("digits-vit", depth=2)


def test_run_width_at_a_ratio_saves_what_prune_width_cuts(model, tmp_path):
    report = run_width(model, WidthConfig(ratio=0.25, round_to=2), out=tmp_path / "w", name="digits-vit",
                       speed=SpeedConfig(batch_size=2, pairs=3))
    by_hand = copy.deepcopy(model)
    plan = prune_width(by_hand, 0.25, round_to=2)
    loaded = vitprune.load(tmp_path / "w")
    x = torch.randn(2, *vitprune.get_adapter(model).input_size)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), by_hand.eval()(x), rtol=0, atol=0)
    assert (report.model, report.out, report.ratio, report.target_gmacs, report.convention) == (
        "digits-vit", str(tmp_path / "w"), 0.25, None, "full")
    assert report.options == {"importance": "magnitude", "heads": False, "embed": True, "isomorphic": True,
                              "round_to": 2}
    assert report.plan == plan.to_dict()
    assert report.before == count_macs(model).totals() and report.after == count_macs(loaded).totals()
    assert report.speed["pairs"] == 3
    assert_saved(report, METADATA_KEY)


def test_run_width_to_a_mac_target_and_with_taylor_importance(model, tmp_path):
    target = 0.7 * count_macs(model, convention="linear").macs
    report = run_width(model, WidthConfig(target_macs=target, convention="linear"), out=tmp_path / "w",
                       speed=NO_SPEED)
    assert report.after["macs_linear"] <= target and 0 < report.ratio < 0.95
    assert report.target_gmacs == target / 1e9 and report.speed is None
    assert_saved(report, METADATA_KEY)
    train = balanced_subset(build_dataset("digits", "train", input_size=vitprune.get_adapter(model).input_size), 32,
                            seed=0)
    taylor = run_width(model, WidthConfig(ratio=0.25, importance="taylor", batches=2), out=tmp_path / "t",
                       train_set=train, speed=NO_SPEED)
    assert taylor.options["importance"] == "taylor" and taylor.plan != run_width(
        model, WidthConfig(ratio=0.25), out=tmp_path / "m", speed=NO_SPEED).plan


@pytest.mark.parametrize("kwargs, message", [
    ({}, "give exactly one of ratio and target_macs"),
    ({"ratio": 0.2, "target_macs": 1e6}, "give exactly one of ratio and target_macs"),
    ({"ratio": 0.2, "importance": "taylor"}, "taylor importance needs a training set"),
    ({"ratio": 1.0}, r"width ratio must be in \[0, 1\), got 1.0"),
    ({"ratio": 0.2, "importance": "random"}, r"unknown importance 'random' \(choose from: magnitude, taylor\)"),
    ({"target_macs": 1e6, "convention": "tp"}, r"unknown convention 'tp' \(choose from: full, linear\)"),
    ({"ratio": 0.2, "batches": 0}, "batches must be at least 1, got 0"),
], ids=["neither", "both", "taylor-without-data", "ratio", "importance", "convention", "batches"])
def test_run_width_refuses_before_any_work(model, tmp_path, kwargs, message):
    with pytest.raises(VitpruneError, match=message):
        run_width(model, WidthConfig(**kwargs), out=tmp_path / "w", speed=NO_SPEED)
    assert not (tmp_path / "w").exists()
