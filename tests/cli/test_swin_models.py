"""Swin on the command line, as a user with their own images runs it: VBP, depth pruning and HetDPT run and save;
STAR (no [CLS] token), HiAP (uneven value widths) and torch-pruning's width planner are one line, nothing written."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import SWIN_TINY
from test_cli import CLASSES, assert_one_line_error, image_folder, run

import vitprune
from vitprune.measure import count_macs


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return image_folder(tmp_path_factory.mktemp("images"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny Swin (32 px) for the user's three classes, saved: a MODEL every command takes."""
    torch.manual_seed(0)
    model = vitprune.create_model("swin_tiny_patch4_window7_224", **{**SWIN_TINY, "num_classes": len(CLASSES)})
    path = tmp_path_factory.mktemp("saved") / "swin"
    vitprune.save(model, path)
    return str(path)


def test_prune_vbp_runs_on_a_swin(capsys, tmp_path, folder, saved):
    out = tmp_path / "run"
    code, stdout, err = run(capsys, "prune", "vbp", saved, "--data", str(folder), "--ratio", "0.5",
                            "--calibration-images", "9", "--no-speed", "--json", "--out", str(out))
    assert code == 0, err
    report = json.loads(stdout)
    final = vitprune.load(out / "model")
    assert report["pruned"]["params"] == count_macs(final).params < report["dense"]["params"]
    assert {e.op for e in vitprune.get_recipe(final).edits} == {"prune_mlp_neurons"}


def test_prune_depth_removes_swin_attention_and_activations(capsys, tmp_path, saved):
    out = tmp_path / "pruned"
    code, stdout, err = run(capsys, "prune", "depth", saved, "--attention", "1,3", "--activation", "0,5",
                            "--no-speed", "--json", "--out", str(out))
    assert code == 0, err
    report = json.loads(stdout)
    loaded = vitprune.load(out)
    assert [e.op for e in vitprune.get_recipe(loaded).edits] == ["remove_attention"] * 2 + ["remove_activation"] * 2
    assert report["after"]["params"] == count_macs(loaded).params < report["before"]["params"]


@pytest.mark.parametrize("command, options, message", [
    ("star", ["--rho", "0.7"], r"STAR needs to prune tokens and propagate LRP relevance through its blocks, which "
                               r"vitprune cannot do on timm-swin models: Swin has no \[CLS\] token"),
    ("hiap", ["--epochs", "1"], "HiAP needs to give each head its own number of value dimensions, which vitprune "
                                "cannot do on timm-swin models"),
    ("hetdpt+", ["--budget", "2", "--macs", "0.001"], "step 2 \\(width\\): width pruning needs to prune embedding "
                                                      "channels and have torch-pruning plan its width"),
], ids=["star", "hiap", "hetdpt+"])
def test_methods_swin_cannot_take_are_one_line(capsys, tmp_path, folder, saved, command, options, message):
    code, _, err = run(capsys, "prune", command, saved, "--data", str(folder), "--no-speed", "--out",
                       str(tmp_path / "x"), *options)
    assert_one_line_error(code, err, message)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("embed", ["--embed", "--no-embed"])
def test_width_pruning_is_one_line(capsys, tmp_path, saved, embed):
    code, _, err = run(capsys, "prune", "width", saved, "--ratio", "0.3", embed, "--no-speed", "--out",
                       str(tmp_path / "x"))
    assert_one_line_error(code, err, "have torch-pruning plan its width, which vitprune cannot do on timm-swin models")
    assert not (tmp_path / "x").exists()
