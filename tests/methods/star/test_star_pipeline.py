"""The STAR pipeline end to end on a small model: schedule, prior, pruning, report, resume, a-STAR MACs."""

from __future__ import annotations

from dataclasses import replace


import pytest
import torch
from conftest import quick_context
from reports import assert_written
from torch.utils.data import Subset

import vitprune
from vitprune.data import build_dataset, build_loader
from vitprune.errors import VitpruneError
from vitprune.measure import SpeedConfig, count_macs
from vitprune.methods.star import keep_rates
from vitprune.methods.star import pipeline as star_pipeline
from vitprune.methods.star.pipeline import (
    ACS_FILE, INTER_FILE, MODEL_DIR, REPORT_FILE, SCHEDULE_FILE, STARConfig, run_star,
)
from vitprune.runs import MethodData
from vitprune.surgery import token_ops
from vitprune.training import TrainConfig, evaluate


@pytest.fixture(scope="module")
def setting():
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=4)
    size = vitprune.get_adapter(model).input_size
    train, val = (build_dataset("digits", split, input_size=size) for split in ("train", "val"))
    calibration = build_dataset("digits", "train", input_size=size, is_training=False)
    config = STARConfig(rho=0.5, alpha=0.3, acs_images=32, lrp_images=8, classes=2, finetune=None, mac_images=4,
                        anchor="minmax")
    return model, train, val, calibration, config


def test_static_run_is_the_schedule_it_reports(setting, tmp_path):
    model, train, val, calibration, config = setting
    report = run_star(model, MethodData(train, val, calibration), config, quick_context(tmp_path))
    for name in (ACS_FILE, INTER_FILE, SCHEDULE_FILE, REPORT_FILE):
        assert (tmp_path / name).is_file()
    assert report.keep_rates == keep_rates(report.acs, 0.5, anchor="minmax")
    loaded = vitprune.load(tmp_path / MODEL_DIR)
    blocks = token_ops(loaded)
    assert {i: b.keep_rate for i, b in blocks.items()} == {i: r for i, r in enumerate(report.keep_rates) if r < 1}
    assert all(b.alpha == 0.3 and not torch.equal(b.inter, torch.ones_like(b.inter)) for b in blocks.values())
    loader = build_loader(val, config.calibration_batch, shuffle=False, seed=0)
    assert report.top1["pruned"] == evaluate(loaded, loader)["top1"]
    assert report.pruned == count_macs(loaded).totals()
    assert report.pruned["macs_full"] < report.dense["macs_full"]
    assert_written(report, tmp_path / REPORT_FILE)


@pytest.mark.slow
def test_mac_target_adaptive_and_resume(setting, tmp_path, monkeypatch):
    model, train, val, calibration, config = setting
    target = 0.7 * count_macs(model).macs
    first = run_star(model, MethodData(train, val, calibration), replace(config, rho=None, target_macs=target),
                     quick_context(tmp_path))
    assert count_macs(vitprune.load(tmp_path / MODEL_DIR)).macs <= target
    monkeypatch.setattr(star_pipeline, "inter_layer_scores", lambda *a, **k: pytest.fail("prior recomputed"))
    monkeypatch.setattr(star_pipeline, "average_cosine_similarity", lambda *a, **k: pytest.fail("ACS recomputed"))
    again = run_star(model, MethodData(train, val, calibration), replace(config, rho=first.rho, adaptive=True),
                     quick_context(tmp_path, resume=True))
    assert again.acs == first.acs and again.keep_rates == first.keep_rates
    assert again.pruned["macs_averaged_over_images"] == 4
    assert again.pruned["macs_full"] <= first.pruned["macs_full"]  # a-STAR never keeps more


@pytest.mark.slow
def test_fine_tuning_is_reported(setting, tmp_path):
    model, train, val, calibration, config = setting
    report = run_star(model, MethodData(train, val, calibration),
                      replace(config, alpha=1.0, finetune=TrainConfig(epochs=1, lr=5e-4, batch_size=64)),
                      quick_context(tmp_path))
    assert set(report.top1) == {"dense", "pruned", "finetuned", "finetune_best"}
    assert not (tmp_path / INTER_FILE).exists()  # alpha 1 needs no prior


@pytest.mark.parametrize("change, pattern", [
    ({"rho": None}, "exactly one of rho"),
    ({"target_macs": 1e6}, "exactly one of rho"),
    ({"rho": 1.5}, r"rho must be in \(0, 1\]"),
    ({"alpha": -0.1}, r"alpha must be in \[0, 1\]"),
    ({"anchor": "ends"}, "unknown anchor 'ends'"),
    ({"lrp_images": 0}, "lrp images must be at least 1"),
])
def test_bad_settings_fail_before_any_work(setting, tmp_path, change, pattern):
    model, train, val, calibration, config = setting
    with pytest.raises(VitpruneError, match=pattern):
        run_star(model, MethodData(train, val), replace(config, **change), quick_context(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_hand_set_rates_need_no_acs(setting, tmp_path):
    model, train, val, calibration, config = setting
    rates = [1.0, 0.5, 1.0, 0.8]
    report = run_star(model, MethodData(train, val, calibration), replace(config, rho=None, rates=rates, alpha=1.0),
                      quick_context(tmp_path))
    assert report.keep_rates == rates and report.acs is None and report.rho is None
    assert not (tmp_path / ACS_FILE).exists()
    assert {i: b.keep_rate for i, b in token_ops(vitprune.load(tmp_path / MODEL_DIR)).items()} == {
        1: 0.5, 3: 0.8}
    with pytest.raises(VitpruneError, match="3 keep rates for a model of 4 blocks"):
        run_star(model, MethodData(train, val), replace(config, rho=None, rates=rates[:3]),
                 quick_context(tmp_path / "other"))
    with pytest.raises(VitpruneError, match=r"keep rates must be in \(0, 1\]"):
        run_star(model, MethodData(train, val), replace(config, rho=None, rates=[0.0] * 4),
                 quick_context(tmp_path / "other"))


def test_a_stage_asking_for_more_images_than_the_data_has_uses_them_all_and_says_so(setting, tmp_path):
    """Issue 38: 18 training images, yet the report said acs_images 500 and lrp_images 1280."""
    model, train, val, calibration, config = setting
    few = Subset(calibration, range(6))
    lines: list[str] = []
    report = run_star(model, MethodData(train, val, few), replace(config, acs_images=500, lrp_images=1280),
                      quick_context(tmp_path, log=lines.append, speed=SpeedConfig(enabled=False)))
    assert (report.config["acs_images"], report.config["lrp_images"]) == (6, 6)
    assert "  acs images: the data has 6 images, not 500; using them all" in lines
    assert "  lrp images: the data has 6 images, not 1280; using them all" in lines
