"""The VBP pipeline end to end: statistics, selection, compensation, fine-tuning, resume, and an exact report."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch
from conftest import quick_context
from reports import assert_written

import vitprune
from vitprune.data import balanced_subset, build_dataset, build_loader
from vitprune.errors import UnreachableTargetError, VitpruneError
from vitprune.measure import SpeedConfig, count_macs, format_count
from vitprune.methods.vbp import mlp_statistics, neuron_scores, prune_by_selection, select_count, select_neurons
from vitprune.methods.vbp import pipeline as vbp_pipeline
from vitprune.methods.vbp.pipeline import (
    MODEL_DIR, REPORT_FILE, SELECTION_FILE, STATISTICS_FILE, VBPConfig, load_statistics, run_vbp, save_statistics,
)
from vitprune.runs import MethodData
from vitprune.training import TrainConfig, evaluate


@pytest.fixture(scope="module")
def setting():
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=4)
    size = vitprune.get_adapter(model).input_size
    train, val = (build_dataset("digits", split, input_size=size) for split in ("train", "val"))
    calibration = build_dataset("digits", "train", input_size=size, is_training=False)
    config = VBPConfig(ratio=0.5, calibration_images=128, finetune=None)
    return model, train, val, calibration, config


def _reference(model, calibration, config, criterion="variance", compensate=True):
    """The same pruning done by hand with the public building blocks."""
    loader = build_loader(balanced_subset(calibration, config.calibration_images, seed=config.seed),
                          config.calibration_batch, shuffle=False, seed=config.seed)
    stats = mlp_statistics(model, loader)
    scores = neuron_scores(model, criterion, loader, stats=stats, seed=config.seed)
    removed = select_neurons(scores, config.ratio)
    pruned = vitprune.create_model("digits-vit", depth=4)
    pruned.load_state_dict(model.state_dict())
    prune_by_selection(pruned, removed, stats if compensate else None)
    return pruned, removed


def test_one_shot_run_matches_the_building_blocks(setting, tmp_path):
    model, train, val, calibration, config = setting
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = run_vbp(model, MethodData(train, val, calibration), config, quick_context(tmp_path))
    reference, removed = _reference(model, calibration, config)
    total = sum(report.widths_dense.values())
    assert report.removed == math.ceil(0.5 * total) == sum(map(len, removed.values()))
    hidden = {str(v.index): v.mlp.hidden_features for v in vitprune.get_adapter(model).blocks()}
    assert report.widths_dense == hidden
    assert report.widths == {str(b): hidden[str(b)] - len(r) for b, r in removed.items()}
    loaded = vitprune.load(tmp_path / MODEL_DIR)
    x = torch.randn(3, *vitprune.get_adapter(model).input_size)
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(x), reference.eval()(x), rtol=0, atol=0)
    loader = build_loader(val, config.calibration_batch, shuffle=False, seed=0)
    assert report.top1 == {"dense": evaluate(model, loader)["top1"], "pruned": evaluate(reference, loader)["top1"]}
    assert report.retention["pruned"] == report.top1["pruned"] / report.top1["dense"]
    assert report.pruned == count_macs(reference).totals() and report.dense == count_macs(model).totals()
    assert report.speed["pairs"] == 3
    assert_written(report, tmp_path / REPORT_FILE)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # the input model is untouched
    for name in (STATISTICS_FILE, SELECTION_FILE, REPORT_FILE):
        assert (tmp_path / name).is_file()


def test_a_mac_target_removes_the_fewest_neurons_that_reach_it(setting, tmp_path):
    """--macs: the variance ranking's lowest neurons, as few as reach the target (one fewer does not), with the
    same mean-shift as a ratio run."""
    model, train, val, calibration, config = setting
    target = 0.7 * count_macs(model).macs
    report = run_vbp(model, MethodData(train, val, calibration), replace(config, ratio=None, target_macs=target),
                     quick_context(tmp_path))
    loader = build_loader(balanced_subset(calibration, config.calibration_images, seed=config.seed),
                          config.calibration_batch, shuffle=False, seed=config.seed)
    stats = mlp_statistics(model, loader)
    scores = neuron_scores(model, "variance", loader, stats=stats, seed=config.seed)
    total = sum(report.widths_dense.values())
    assert report.ratio == report.removed / total and report.pruned["macs_full"] <= target
    fewer = vitprune.load(tmp_path / MODEL_DIR)
    assert count_macs(fewer).macs == report.pruned["macs_full"]
    one_less = copy.deepcopy(model)
    prune_by_selection(one_less, select_count(scores, report.removed - 1))
    assert count_macs(one_less).macs > target
    reference = copy.deepcopy(model)
    prune_by_selection(reference, select_count(scores, report.removed), stats)
    x = torch.randn(3, *vitprune.get_adapter(model).input_size)
    with torch.no_grad():
        torch.testing.assert_close(fewer.eval()(x), reference.eval()(x), rtol=0, atol=0)
    all_but_one = copy.deepcopy(model)
    prune_by_selection(all_but_one, select_count(scores, total - 1))
    with pytest.raises(UnreachableTargetError, match=rf"VBP's neuron removal cannot reach 1 MACs per image \(full "
                                                     rf"convention\); the nearest it reaches is "
                                                     rf"{format_count(count_macs(all_but_one).macs)}"):
        run_vbp(model, MethodData(train, val, calibration), replace(config, ratio=None, target_macs=1.0),
                quick_context(tmp_path / "far"))


def test_baseline_without_compensation_needs_no_statistics(setting, tmp_path, monkeypatch):
    model, train, val, calibration, config = setting
    monkeypatch.setattr(vbp_pipeline, "mlp_statistics", lambda *a, **k: pytest.fail("no statistics pass needed"))
    report = run_vbp(model, MethodData(train, val, calibration),
                     replace(config, criterion="magnitude", compensate=False),
                     quick_context(tmp_path))
    reference, _ = _reference(model, calibration, config, criterion="magnitude", compensate=False)
    assert not (tmp_path / STATISTICS_FILE).exists()
    x = torch.randn(2, *vitprune.get_adapter(model).input_size)
    with torch.no_grad():
        torch.testing.assert_close(vitprune.load(tmp_path / MODEL_DIR)(x), reference.eval()(x), rtol=0, atol=0)
    assert report.criterion == "magnitude" and report.compensate is False


@pytest.mark.slow
def test_resume_reuses_statistics_and_selection(setting, tmp_path, monkeypatch):
    model, train, val, calibration, config = setting
    first = run_vbp(model, MethodData(train, val, calibration), config, quick_context(tmp_path))
    with pytest.raises(VitpruneError, match="is not empty; pass --resume"):
        run_vbp(model, MethodData(train, val, calibration), config, quick_context(tmp_path))
    monkeypatch.setattr(vbp_pipeline, "mlp_statistics", lambda *a, **k: pytest.fail("statistics recomputed"))
    monkeypatch.setattr(vbp_pipeline, "neuron_scores", lambda *a, **k: pytest.fail("selection recomputed"))
    again = run_vbp(model, MethodData(train, val, calibration), config, quick_context(tmp_path, resume=True))
    assert again.top1 == first.top1 and again.widths == first.widths


@pytest.mark.slow
def test_fine_tuning_with_distillation_recovers_and_is_reported(setting, trained_digits, tmp_path):
    _, train, val, calibration, config = setting
    model = trained_digits
    tune = TrainConfig(epochs=1, lr=5e-4, batch_size=64)
    report = run_vbp(model, MethodData(train, val, calibration),
                     replace(config, ratio=0.7, finetune=tune, distill="soft", alpha=0.5),
                     quick_context(tmp_path))
    loaded = vitprune.load(tmp_path / MODEL_DIR)
    loader = build_loader(val, config.calibration_batch, shuffle=False, seed=0)
    assert report.top1["finetuned"] == evaluate(loaded, loader)["top1"]
    assert report.top1["finetune_best"] == report.top1["finetuned"]  # one epoch: its result is the best
    assert (tmp_path / "finetune").is_dir()
    assert report.top1["finetuned"] > report.top1["pruned"] + 0.05, report.top1


def test_statistics_round_trip_and_a_corrupt_file(tmp_path):
    model = vitprune.create_model("digits-vit", depth=2)
    images = torch.randn(4, *vitprune.get_adapter(model).input_size)
    stats = mlp_statistics(model, [(images, None)])
    save_statistics(stats, tmp_path / "s.safetensors")
    loaded = load_statistics(tmp_path / "s.safetensors")
    assert loaded.keys() == stats.keys()
    for b in stats:
        assert loaded[b].count == stats[b].count
        assert torch.equal(loaded[b].mean, stats[b].mean) and torch.equal(loaded[b].var, stats[b].var)
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(VitpruneError, match="cannot read statistics from .*bad.safetensors.*delete it"):
        load_statistics(tmp_path / "bad.safetensors")


@pytest.mark.parametrize("change, pattern", [
    ({"ratio": 0.0}, r"ratio must be in \(0, 1\)"),
    ({"ratio": 1.0}, r"ratio must be in \(0, 1\), got 1.0: 1 would remove every MLP neuron"),
    ({"ratio": 1.5}, r"ratio must be in \(0, 1\)"),
    ({"ratio": 0.9999}, r"a ratio of 0.9999 removes all \d+ MLP neurons of the network"),  # ceil rounds up to all
    ({"criterion": "l1"}, "unknown criterion 'l1'"),
    ({"rounding": "up"}, "unknown rounding 'up'"),
    ({"distill": "kl"}, "unknown distill 'kl'"),
    ({"calibration_images": 1}, "at least 2 images"),
    ({"target_macs": 1e6}, "give exactly one of ratio and target_macs"),
    ({"ratio": None}, "give exactly one of ratio and target_macs"),
    ({"ratio": None, "target_macs": -1.0}, r"a MAC target is a share of the model's MACs \(0.6 or 60%\) or MACs per "
                                           r"image with a unit \(850M, 1.2G\); got -1.0"),
    ({"ratio": None, "target_macs": 1e12}, "is not below the model's .* there is nothing to prune"),
])
def test_bad_settings_fail_before_any_work(setting, tmp_path, change, pattern):
    model, train, val, calibration, config = setting
    with pytest.raises(VitpruneError, match=pattern):
        run_vbp(model, MethodData(train, val), replace(config, **change), quick_context(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("speed, pattern", [(SpeedConfig(pairs=0), "pairs must be at least 1"),
                                            (SpeedConfig(batch_size=0), "batch size must be at least 1"),
                                            (SpeedConfig(warmup=-1), "warmup must be at least 0")])
def test_a_bad_speed_setting_fails_before_any_work(setting, tmp_path, speed, pattern):
    model, train, val, calibration, config = setting
    with pytest.raises(VitpruneError, match=pattern):
        run_vbp(model, MethodData(train, val), config, quick_context(tmp_path / "run", speed=speed))
    assert not (tmp_path / "run").exists()
