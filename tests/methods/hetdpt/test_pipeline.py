"""The HetDPT pipeline end to end: stages decide, save what they decided, resume, and the report is exact."""

from __future__ import annotations

import functools
import json
from dataclasses import replace

import pytest
import torch
from reports import assert_written

import vitprune
from vitprune.data import build_dataset, build_loader
from vitprune.errors import VitpruneError
from vitprune.measure import SpeedConfig, count_macs
from vitprune.methods.hetdpt.pipeline import (
    MODEL_DIR, POINTS_FILE, PREDICTOR_FILE, PREDICTOR_PLOT, REPORT_FILE, SELECTION_FILE, configure, parse_split,
    preset, run_hetdpt,
)
from vitprune.training import TrainConfig, evaluate

#: The timing is not what these tests check; a short one keeps them fast.
run_hetdpt = functools.partial(run_hetdpt, speed=SpeedConfig(batch_size=4, pairs=3))

TINY = TrainConfig(epochs=1, lr=5e-4, batch_size=64)


@pytest.fixture(scope="module")
def setting():
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=4)
    size = vitprune.get_adapter(model).input_size
    train, val = (build_dataset("digits", split, input_size=size) for split in ("train", "val"))
    config = replace(preset("digits"), probe=TINY, probe_images=256, te_images=64, sweep_layers=2,
                     interleaved_rounds=1, search=TINY, finetune=TINY)
    return model, train, val, config


def test_full_pipeline_on_a_small_model(setting, tmp_path):
    model, train, val, config = setting
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = run_hetdpt(model, train, val, budget=3, run_dir=tmp_path, config=config)
    split = report.split
    assert split["chosen_by"] == "predictor" and split["attention"] + split["activation"] == 3
    assert (len(report.attention), len(report.activation)) == (split["attention"], split["activation"])
    assert report.merged_blocks == report.activation
    points = json.loads((tmp_path / POINTS_FILE).read_text())
    assert len(points) == 1 + 2 + 2 + 1  # dense, two sweeps of 2, one interleaved round (first step shared)
    assert report.predictor["fit"]["points"] == [[p["a"], p["t"], p["top1"]] for p in points]
    line = report.predictor["split"]["line"]
    best = max(line, key=lambda p: p["predicted"])
    assert (best["attention"], best["activation"]) == (split["attention"], split["activation"])
    for name in (PREDICTOR_FILE, PREDICTOR_PLOT, SELECTION_FILE, REPORT_FILE):
        assert (tmp_path / name).is_file()
    pruned = vitprune.load(tmp_path / MODEL_DIR)
    views = vitprune.get_adapter(pruned).blocks()
    assert [v.index for v in views if v.attn is None] == report.attention
    assert [v.index for v in views if v.mlp.merged] == report.activation
    assert report.pruned["params"] == count_macs(pruned).params < report.dense["params"]
    assert report.pruned["macs_linear"] == count_macs(pruned, convention="linear").macs
    loader = build_loader(val, 64, shuffle=False, seed=0)
    assert report.top1["finetuned"] == evaluate(pruned, loader)["top1"]
    assert report.top1["dense"] == evaluate(model, loader)["top1"]
    assert set(report.seconds) >= {"step 1: predictor of accuracy per split", "stage 2: fine-tune and merge"}
    assert json.loads((tmp_path / REPORT_FILE).read_text())["attention"] == report.attention
    assert_written(report, tmp_path / REPORT_FILE)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.slow
def test_fixed_split_and_resume_reuse_finished_stages(setting, tmp_path):
    model, train, val, config = setting
    first = run_hetdpt(model, train, val, budget=2, split=(1, 1), run_dir=tmp_path, config=config)
    assert first.predictor is None and first.split["chosen_by"] == "user"
    assert not (tmp_path / POINTS_FILE).exists()
    weights = vitprune.load(tmp_path / MODEL_DIR).state_dict()
    with pytest.raises(VitpruneError, match="is not empty; pass --resume"):
        run_hetdpt(model, train, val, budget=2, split=(1, 1), run_dir=tmp_path, config=config)
    again = run_hetdpt(model, train, val, budget=2, split=(1, 1), run_dir=tmp_path, config=config, resume=True)
    assert (again.attention, again.activation) == (first.attention, first.activation)
    assert again.top1 == {**first.top1, "finetune_best": None}  # nothing retrained
    reloaded = vitprune.load(tmp_path / MODEL_DIR).state_dict()
    assert all(torch.equal(weights[k], v) for k, v in reloaded.items())


@pytest.mark.slow
def test_a_saved_predictor_serves_another_budget(setting, tmp_path):
    model, train, val, config = setting
    run_hetdpt(model, train, val, budget=3, run_dir=tmp_path / "a", config=config)
    report = run_hetdpt(model, train, val, budget=2, run_dir=tmp_path / "b", config=config,
                        predictor=tmp_path / "a" / PREDICTOR_FILE)
    assert not (tmp_path / "b" / POINTS_FILE).exists()
    assert report.predictor["fit"] == json.loads((tmp_path / "a" / PREDICTOR_FILE).read_text())
    assert report.split["attention"] + report.split["activation"] == 2


@pytest.mark.parametrize("kwargs, message", [
    ({"budget": 0}, r"budget 0 is out of range: the model has 4 attention and 4 activation layers \(8 in all\)"),
    ({"budget": 9}, "budget 9 is out of range"),
    ({"budget": 3, "split": (1, 1)}, "split 1,1 removes 2 layers, not the budget of 3"),
    ({"budget": 5, "split": (5, 0)}, "split asks for 5 attention layers, but the model has only 4"),
    ({"budget": 2, "predictor": "missing.json"}, "predictor file missing.json does not exist"),
    ({"budget": 2, "distill": "strong"}, r"unknown distill 'strong' \(choose from: none, soft, hard\)"),
], ids=["zero", "too-many", "split-sum", "split-too-big", "missing-predictor", "bad-setting"])
def test_bad_input_is_one_clear_error(setting, tmp_path, kwargs, message):
    model, train, val, config = setting
    if "distill" in kwargs:
        config = replace(config, distill=kwargs.pop("distill"))
    with pytest.raises(VitpruneError, match=message):
        run_hetdpt(model, train, val, run_dir=tmp_path / "run", config=config, **kwargs)


def test_split_and_configure_parse_the_command_line():
    assert parse_split("auto") is None and parse_split("2,3") == (2, 3)
    with pytest.raises(VitpruneError, match="split takes 'auto' or two counts"):
        parse_split("2")
    config = configure("digits", epochs=3, batch_size=32, lr=1e-3, distill="hard", shortlist=4)
    assert config.finetune.epochs == 3 and config.finetune.lr == 1e-3
    assert {c.batch_size for c in (config.probe, config.search, config.finetune)} == {32}
    assert config.distill == "hard" and config.shortlist == 4 and config.search.epochs == preset("digits").search.epochs
    with pytest.raises(VitpruneError, match="unknown HetDPT preset 'cifar'"):
        preset("cifar")


def test_a_new_batch_scales_each_stages_learning_rate():
    """Presets give each stage's lr for its own global batch (lr = 5e-5 · batch / 512, DeiT's rule): another batch
    scales it, unless an lr is given; the run report holds the scaled values (its config)."""
    imagenet = preset("imagenet")
    config = configure("imagenet", batch_size=1024)
    assert imagenet.finetune.lr == pytest.approx(5e-5 * 4096 / 512)
    assert config.probe.lr == pytest.approx(5e-5 * 1024 / 512) == config.search.lr
    assert config.finetune.lr == pytest.approx(imagenet.finetune.lr * 1024 / 4096)
    given = configure("imagenet", batch_size=1024, lr=3e-4)
    assert given.finetune.lr == 3e-4 and given.probe.lr == config.probe.lr
    assert configure("imagenet").finetune.lr == imagenet.finetune.lr
    assert config.to_dict()["finetune"]["lr"] == config.finetune.lr
