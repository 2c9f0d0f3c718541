"""``run_width``: torch-pruning's plan at a ratio or to a MAC target, the pruned copy saved with its report."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
from reports import assert_saved

import vitprune
from vitprune.data import balanced_subset, build_dataset, build_loader
from vitprune.errors import VitpruneError
from vitprune.measure import SpeedConfig, count_macs
from vitprune.methods.width import WidthConfig, plan_width, prune_width, run_width
from vitprune.methods.width.pipeline import METADATA_KEY
from vitprune.runs import MethodData, RunContext

pytest.importorskip("torch_pruning")

NO_SPEED = SpeedConfig(enabled=False)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return vitprune.create_model("digits-vit", depth=2)


def test_run_width_at_a_ratio_saves_what_prune_width_cuts(model, tmp_path):
    report = run_width(model, MethodData(), WidthConfig(ratio=0.25, round_to=2), RunContext(tmp_path / "w",
                       name="digits-vit", speed=SpeedConfig(batch_size=2, pairs=3)))
    by_hand = copy.deepcopy(model)
    plan = prune_width(by_hand, 0.25, round_to=2)
    loaded = vitprune.load(tmp_path / "w")
    x = torch.randn(2, *vitprune.get_adapter(model).input_size)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), by_hand.eval()(x), rtol=0, atol=0)
    assert (report.model, report.out, report.ratio, report.target_gmacs, report.convention) == (
        "digits-vit", str(tmp_path / "w"), 0.25, None, "full")
    assert report.options == {"importance": "magnitude", "heads": 1.0, "head_dims": 0.5, "embed": True,
                              "isomorphic": True, "round_to": 2}
    assert report.taylor_images is None
    assert report.plan == plan.to_dict()
    assert report.before == count_macs(model).totals() and report.after == count_macs(loaded).totals()
    assert report.speed["pairs"] == 3
    assert_saved(report, METADATA_KEY)


def test_run_width_to_a_mac_target_and_with_taylor_importance(model, tmp_path):
    """The target in torch-pruning's own count (the HetDPT+ and Isomorphic Pruning tables' convention)."""
    target = 0.7 * count_macs(model, convention="tp").macs
    report = run_width(model, MethodData(), WidthConfig(target_macs=target, convention="tp"),
                       RunContext(tmp_path / "w", speed=NO_SPEED))
    assert report.after["macs_tp"] <= target and 0 < report.ratio < 0.95
    assert report.after["macs_tp"] == count_macs(vitprune.load(tmp_path / "w"), convention="tp").macs
    assert report.target_gmacs == target / 1e9 and report.speed is None
    assert_saved(report, METADATA_KEY)
    train = balanced_subset(build_dataset("digits", "train", input_size=vitprune.get_adapter(model).input_size), 32,
                            seed=0)
    taylor = run_width(model, MethodData(calibration=train), WidthConfig(ratio=0.25, importance="taylor",
                       taylor_batches=2, taylor_batch_size=8), RunContext(tmp_path / "t", speed=NO_SPEED))
    assert taylor.options["importance"] == "taylor" and taylor.plan != run_width(model, MethodData(),
                                                                                 WidthConfig(ratio=0.25),
                                                                                 RunContext(tmp_path / "m",
                                                                                 speed=NO_SPEED)).plan


def test_taylor_importance_takes_the_configured_batches(model, tmp_path):
    """taylor_batches x taylor_batch_size images, the first batches of the seeded shuffle: the plan is torch-pruning's
    from exactly those images, and one batch more changes it."""
    train = balanced_subset(build_dataset("digits", "train", input_size=vitprune.get_adapter(model).input_size,
                                          is_training=False), 64, seed=0)
    config = WidthConfig(ratio=0.3, importance="taylor", taylor_batches=3, taylor_batch_size=8)
    report = run_width(model, MethodData(calibration=train), config, RunContext(tmp_path / "t", speed=NO_SPEED))
    assert report.taylor_images == 24
    batches = list(itertools.islice(build_loader(train, 8, shuffle=True, seed=0), 3))
    options = {k: v for k, v in config.plan_options().items() if k != "importance"}
    assert report.plan == plan_width(model, 0.3, importance="taylor", batches=batches, **options).to_dict()
    more = run_width(model, MethodData(calibration=train), WidthConfig(ratio=0.3, importance="taylor",
                     taylor_batches=8, taylor_batch_size=8), RunContext(tmp_path / "more", speed=NO_SPEED))
    assert more.taylor_images == 64 and more.plan != report.plan


def test_the_default_taylor_images_are_the_measured_stable_count():
    """docs/width.md, "How many images taylor importance needs": on the digits model the pruned set's split-half
    overlap passed 0.9 at ratio 0.5 by 704 images and reaches about 0.9 at ratio 0.3 near 1,024
    (benchmarks/results/taylor_stability.md): 16 batches of 64."""
    defaults = WidthConfig(ratio=0.5)
    assert (defaults.taylor_batches, defaults.taylor_batch_size) == (16, 64)


@pytest.mark.parametrize("kwargs, message", [
    ({}, "give exactly one of ratio and target_macs"),
    ({"ratio": 0.2, "target_macs": 1e6}, "give exactly one of ratio and target_macs"),
    ({"ratio": 0.2, "importance": "taylor"}, r"taylor importance needs training images \(--data\)"),
    ({"ratio": 1.0}, r"width ratio must be in \[0, 1\), got 1.0"),
    ({"ratio": 0.2, "importance": "random"}, r"unknown importance 'random' \(choose from: magnitude, taylor\)"),
    ({"target_macs": 1e6, "convention": "fvcore"}, r"unknown convention 'fvcore' \(choose from: full, linear, tp\)"),
    ({"ratio": 0.2, "taylor_batches": 0}, "taylor_batches must be at least 1, got 0"),
    ({"ratio": 0.2, "taylor_batch_size": 0}, "taylor_batch_size must be at least 1, got 0"),
    ({"ratio": 0.2, "heads": -0.5}, r"heads \(a share of the width ratio\) must be in \[0, 1\], got -0.5"),
], ids=["neither", "both", "taylor-without-data", "ratio", "importance", "convention", "batches", "batch-size",
        "heads"])
def test_run_width_refuses_before_any_work(model, tmp_path, kwargs, message):
    with pytest.raises(VitpruneError, match=message):
        run_width(model, MethodData(), WidthConfig(**kwargs), RunContext(tmp_path / "w", speed=NO_SPEED))
    assert not (tmp_path / "w").exists()
