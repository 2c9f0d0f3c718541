"""``vitprune finetune``: a run directory with metrics, checkpoint and final model; clear errors; distillation."""

from __future__ import annotations

import copy
import io
import json
import math
import re
import sys

import pytest
from test_cli import CLASSES, assert_one_line_error, image_folder, run

import vitprune
from vitprune.cli.app import console, err_console
from vitprune.data import DigitsDataset, build_loader
from vitprune.surgery import prune_mlp_neurons
from vitprune.training import evaluate, progress

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


def test_a_log_shows_each_epoch_as_it_ends(capsys, tmp_path, monkeypatch):
    """stdout and stderr into one file, as under CI or nohup: each epoch's progress line and then its result come as
    the epoch ends, in order, rather than the results at exit."""
    model = vitprune.save(vitprune.create_model("digits-vit", depth=1, num_classes=len(CLASSES)), tmp_path / "model")
    log = io.StringIO()
    for stream in ("stdout", "stderr"):
        monkeypatch.setattr(sys, stream, log)
    monkeypatch.setattr(err_console, "is_interactive", False)  # were pytest's stderr a terminal
    monkeypatch.setattr(console, "width", 200)  # the saved line's path, unwrapped
    monkeypatch.setattr(progress, "LINE_INTERVAL", math.inf)  # no lines on the clock, however slow the machine
    code, _, _ = run(capsys, "finetune", str(model), "--data", str(image_folder(tmp_path / "images")), "--epochs", "2",
                     "--batch-size", "6", "--out", str(tmp_path / "run"))
    assert code == 0
    lines = [line for line in log.getvalue().splitlines() if line.startswith(("epoch", "saved"))]
    patterns = [r"epoch 1/2 3/6 loss \d\.\d{3}  acc \d\.\d{3}  \d+ img/s \d:\d\d:\d\d",
                r"epoch 1: train loss \d\.\d{4}, val top-1 \d+\.\d\d% \(\d+ img/s\)",
                r"epoch 2/2 6/6 loss \d\.\d{3}  acc \d\.\d{3}  \d+ img/s \d:\d\d:\d\d",
                r"epoch 2: train loss \d\.\d{4}, val top-1 \d+\.\d\d% \(\d+ img/s\)",
                r"saved the fine-tuned model to \S+ \(starting checkpoint: \S+\)"]
    assert len(lines) == len(patterns) and all(re.fullmatch(p, line) for p, line in zip(patterns, lines)), lines


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_resumed_run_reports_every_epoch(capsys, tmp_path, small_saved, monkeypatch):
    """The summary (and the saved model's metadata) lists the epochs trained before the interrupt too."""
    from interrupts import Batches

    argv = ["finetune", str(small_saved), "--data", "digits", "--epochs", "2", "--batch-size", "256", "--lr", "1e-3",
            "--out", str(tmp_path / "run"), "--json"]
    with monkeypatch.context() as patch:
        Batches(patch, stop=7)  # the second of epoch 2's six batches
        code, _, _ = run(capsys, *argv)
    assert code == 130
    code, out, err = run(capsys, *argv, "--resume")
    assert code == 0, err
    assert [e["epoch"] for e in json.loads(out)["epochs"]] == [1, 2]
