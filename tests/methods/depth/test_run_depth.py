"""``run_depth``: the pruned copy saved with its report, measured before and after, timed against the original."""

from __future__ import annotations

import pytest
import torch
from reports import assert_saved

import vitprune
from vitprune.errors import VitpruneError
from vitprune.measure import SpeedConfig, count_macs
from vitprune.methods.depth import DepthConfig, run_depth
from vitprune.methods.depth.pipeline import METADATA_KEY
from vitprune.runs import MethodData, RunContext
from vitprune.surgery import prune_depth


def test_run_depth_saves_what_prune_depth_cuts_and_reports_it(tmp_path):
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=4)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = run_depth(model, MethodData(), DepthConfig([3, 1], [2], identity="skip"), RunContext(tmp_path / "d",
                       name="digits-vit", speed=SpeedConfig(batch_size=2, pairs=3)))
    by_hand = vitprune.create_model("digits-vit", depth=4)
    by_hand.load_state_dict(before)
    prune_depth(by_hand, [3, 1], [2], identity="skip")
    loaded = vitprune.load(tmp_path / "d")
    x = torch.randn(2, *vitprune.get_adapter(model).input_size)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), by_hand.eval()(x), rtol=0, atol=0)
    assert (report.model, report.out, report.attention, report.activation) == ("digits-vit", str(tmp_path / "d"),
                                                                              [1, 3], [2])
    assert (report.identity, report.fold_norm, report.output_gelu) == ("skip", False, False)
    assert report.before == count_macs(model).totals() and report.after == count_macs(loaded).totals()
    assert report.speed["pairs"] == 3 and report.speed["a"]["batch_size"] == 2
    assert_saved(report, METADATA_KEY)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_run_depth_without_timing_reports_no_speed(tmp_path):
    report = run_depth(vitprune.create_model("digits-vit", depth=2), MethodData(), DepthConfig(activation=[0]),
                       RunContext(tmp_path / "d", speed=SpeedConfig(enabled=False)))
    assert report.speed is None and report.model is None and report.attention == []
    assert_saved(report, METADATA_KEY)
    with pytest.raises(VitpruneError, match="attention index 5 is out of range"):
        run_depth(vitprune.create_model("digits-vit", depth=2), MethodData(), DepthConfig([5]),
                  RunContext(tmp_path / "e"))
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize("config, message", [
    (DepthConfig(), "nothing to prune: give attention and/or activation block indices"),
    (DepthConfig([0], identity="zero"), r"unknown identity 'zero' \(choose from: norm, skip\)"),
], ids=["nothing", "identity"])
def test_run_depth_refuses_a_config_before_any_work(tmp_path, config, message):
    with pytest.raises(VitpruneError, match=message):
        run_depth(vitprune.create_model("digits-vit", depth=2), MethodData(), config, RunContext(tmp_path / "e"))
    assert not (tmp_path / "e").exists()
