"""``vitprune prune width``: torch-pruning's plan, saved as recorded edits; targets and mistakes."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from test_cli import assert_one_line_error, run

import vitprune
from vitprune.measure import count_macs
from vitprune.recipe import read_document

pytest.importorskip("torch_pruning")


@pytest.mark.slow
def test_width_to_a_mac_target_saves_the_pruned_model(capsys, tmp_path):
    out = tmp_path / "w"
    dense = count_macs(vitprune.create_model("digits-vit"), convention="linear").macs
    code, stdout, _ = run(capsys, "prune", "width", "digits-vit", "--no-pretrained", "--target-macs", "60%",
                          "--convention", "linear", "--out", str(out), "--no-speed", "--json")
    assert code == 0
    summary = json.loads(stdout)
    assert 0.55 * dense < summary["after"]["macs_linear"] <= 0.6 * dense and 0 < summary["ratio"] < 0.95
    loaded = vitprune.load(out)
    assert count_macs(loaded, convention="linear").macs == summary["after"]["macs_linear"]
    ops = {e.op for e in vitprune.get_recipe(loaded).edits}
    assert ops == {"prune_heads", "prune_head_dims", "prune_mlp_neurons", "prune_embed_dims"}  # the defaults: both
    assert vitprune.get_adapter(loaded).embed_dim == len(summary["plan"]["embed"])


def test_taylor_width_on_digits_shows_the_table_and_speed(capsys, tmp_path, monkeypatch):
    from vitprune.cli.app import console

    monkeypatch.setattr(console, "width", 200)
    out = tmp_path / "w"
    code, stdout, _ = run(capsys, "prune", "width", "digits-vit", "--no-pretrained", "--ratio", "0.3",
                          "--importance", "taylor", "--data", "digits", "--taylor-batches", "2", "--taylor-batch-size",
                          "8", "--heads", "1", "--head-dims", "0", "--no-embed", "--out", str(out), "--repeats", "3",
                          "--speed-batch", "4")
    assert code == 0
    assert "width ratio 0.3000 (taylor, isomorphic, heads 1, head dims 0)" in stdout and "alternating pairs" in stdout
    assert read_document(out)["metadata"]["prune_width"]["taylor_images"] == 16
    loaded = vitprune.load(out)
    assert {e.op for e in vitprune.get_recipe(loaded).edits} <= {"prune_heads", "prune_mlp_neurons"}
    with torch.no_grad():
        assert torch.isfinite(loaded(torch.randn(2, *vitprune.get_adapter(loaded).input_size))).all()


@pytest.mark.parametrize("args, pattern", [
    (["--ratio", "0.3", "--target-macs", "10M"], r"give exactly one of ratio and target_macs \(--target-macs\)"),
    ([], r"give exactly one of ratio and target_macs \(--target-macs\)"),
    (["--ratio", "0.3", "--importance", "taylor"], r"taylor importance needs training images \(--data\)"),
    (["--ratio", "1.5"], r"width ratio must be in \[0, 1\), got 1.5"),
    (["--target-macs", "1G"], "is not below the model's"),
], ids=["both", "neither", "taylor-without-data", "ratio", "target-too-big"])
def test_width_user_errors(capsys, tmp_path, args, pattern):
    code, _, err = run(capsys, "prune", "width", "digits-vit", "--no-pretrained", "--no-speed", "--out",
                       str(tmp_path / "x"), *args)
    assert_one_line_error(code, err, pattern)
    assert not (tmp_path / "x").exists()


def test_width_without_torch_pruning_says_how_to_install(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_pruning", None)
    code, _, err = run(capsys, "prune", "width", "digits-vit", "--no-pretrained", "--no-speed", "--ratio", "0.3",
                       "--out", str(tmp_path / "x"))
    assert_one_line_error(code, err, r"width pruning needs torch-pruning: pip install 'vitprune\[width\]'")
