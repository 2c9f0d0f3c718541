"""``vitprune finetune``: a run directory with metrics, checkpoint and final model; clear errors; distillation."""

from __future__ import annotations

import copy
import json

import pytest
from test_cli import assert_one_line_error, run

import vitprune
from vitprune.data import DigitsDataset, build_loader
from vitprune.surgery import prune_mlp_neurons
from vitprune.training import evaluate

ARGS = ["--data", "digits", "--epochs", "1", "--batch-size", "64", "--lr", "1e-3"]


@pytest.fixture()
def small_saved(tmp_path):
    return vitprune.save(vitprune.create_model("digits-vit", depth=2), tmp_path / "small")


def test_finetune_writes_a_complete_run(capsys, tmp_path, small_saved):
    code, out, _ = run(capsys, "finetune", str(small_saved), *ARGS, "--out", str(tmp_path / "run"), "--json")
    assert code == 0
    summary = json.loads(out)
    assert [e["epoch"] for e in summary["epochs"]] == [1] and summary["epochs"][0]["step"] == 23
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(logged) == 1 and logged[0]["val_count"] == 360 and 0 <= logged[0]["val_top1"] <= 1
    final = vitprune.load(tmp_path / "run" / "model")
    assert vitprune.get_recipe(final).base.kwargs == {"depth": 2}
    assert (tmp_path / "run" / "checkpoint" / "state.pt").is_file()

    code, _, err = run(capsys, "finetune", str(small_saved), *ARGS, "--out", str(tmp_path / "run"))
    assert_one_line_error(code, err, r"already holds a checkpoint; pass --resume to continue it")
    code, _, err = run(capsys, "finetune", str(small_saved), *ARGS, "--epochs", "2", "--out", str(tmp_path / "run"),
                       "--resume")
    assert_one_line_error(code, err, r"settings differ from the checkpoint's \(epochs\)")


def test_finetune_with_mixup_and_cutmix(capsys, tmp_path, small_saved):
    code, out, _ = run(capsys, "finetune", str(small_saved), *ARGS, "--mixup", "0.8", "--cutmix", "1.0",
                       "--label-smoothing", "0.1", "--out", str(tmp_path / "run"), "--json")
    assert code == 0 and json.loads(out)["epochs"][0]["step"] == 23


def test_distilling_from_a_random_original_is_refused(capsys, tmp_path, small_saved):
    code, _, err = run(capsys, "finetune", str(small_saved), *ARGS, "--out", str(tmp_path / "r"), "--distill", "soft")
    assert_one_line_error(code, err, r"has random weights, so there is no original to distil from; pass --teacher")


@pytest.mark.slow
def test_pruned_digits_recovers_with_self_distillation(capsys, tmp_path, trained_digits):
    """End to end: prune the trained default, fine-tune with soft KD from its original (the cached model)."""
    model = copy.deepcopy(trained_digits)
    for block in range(12):
        prune_mlp_neurons(model, block, list(range(0, 192, 8)))
    val = build_loader(DigitsDataset("val"), 256, shuffle=False, seed=0)
    damaged = evaluate(model, val)["top1"]
    saved = vitprune.save(model, tmp_path / "pruned")
    code, out, _ = run(capsys, "finetune", str(saved), "--data", "digits", "--epochs", "2", "--lr", "1e-3",
                       "--distill", "soft", "--alpha", "0.5", "--tau", "2", "--out", str(tmp_path / "run"), "--json")
    assert code == 0
    summary = json.loads(out)
    assert summary["teacher"] == "original"
    recovered = summary["epochs"][-1]["val_top1"]
    assert damaged < 0.9 and recovered > damaged + 0.05, (damaged, recovered)
    final = vitprune.load(tmp_path / "run" / "model")
    assert evaluate(final, val)["top1"] == recovered
    assert [e.op for e in vitprune.get_recipe(final).edits] == ["prune_mlp_neurons"] * 12
