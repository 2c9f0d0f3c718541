"""ConvNeXt on the command line, as a user with their own images runs it: VBP and activation removal run and save
(HiAP: test_swin_models.py); every method that needs attention or tokens is one line, with nothing written."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import CONVNEXT_TINY
from test_cli import CLASSES, assert_one_line_error, image_folder, run

import vitprune
from vitprune.measure import count_macs


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return image_folder(tmp_path_factory.mktemp("images"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny ConvNeXt (32 px) for the user's three classes, saved: a MODEL every command takes."""
    torch.manual_seed(0)
    model = vitprune.create_model("convnext_tiny", **{**CONVNEXT_TINY, "num_classes": len(CLASSES)})
    path = tmp_path_factory.mktemp("saved") / "convnext"
    vitprune.save(model, path)
    return str(path)


def test_prune_vbp_runs_on_a_convnext(capsys, tmp_path, folder, saved):
    out = tmp_path / "run"
    code, stdout, err = run(capsys, "prune", "vbp", saved, "--data", str(folder), "--ratio", "0.5",
                            "--calibration-images", "9", "--no-speed", "--json", "--out", str(out))
    assert code == 0, err
    report = json.loads(stdout)
    final = vitprune.load(out / "model")
    assert report["pruned"]["params"] == count_macs(final).params < report["dense"]["params"]
    assert {e.op for e in vitprune.get_recipe(final).edits} == {"prune_mlp_neurons"}


@pytest.mark.parametrize("command, options, message", [
    ("star", ["--rho", "0.7"], "STAR needs to prune tokens and propagate LRP relevance through its blocks, which "
                               "vitprune cannot do on timm-convnext models"),
    ("hetdpt", ["--budget", "2"], "HetDPT needs to remove attention sublayers"),
    # A chain refuses before any step runs, naming the step.
    ("hetdpt+", ["--budget", "2", "--macs", "0.001"], "step 1 \\(hetdpt\\): HetDPT needs to remove attention "
                                                      "sublayers"),
], ids=["star", "hetdpt", "hetdpt+"])
def test_methods_that_need_attention_or_tokens_are_one_line(capsys, tmp_path, folder, saved, command, options,
                                                             message):
    code, _, err = run(capsys, "prune", command, saved, "--data", str(folder), "--no-speed", "--out",
                       str(tmp_path / "x"), *options)
    assert_one_line_error(code, err, message)
    assert not (tmp_path / "x").exists()


def test_width_pruning_is_one_line(capsys, tmp_path, saved):
    code, _, err = run(capsys, "prune", "width", saved, "--ratio", "0.3", "--no-speed", "--out", str(tmp_path / "x"))
    assert_one_line_error(code, err, "width pruning needs to prune heads and head dimensions")
    assert not (tmp_path / "x").exists()


def test_prune_depth_removes_convnext_activations(capsys, tmp_path):
    out = tmp_path / "pruned"
    code, stdout, err = run(capsys, "prune", "depth", "convnext_tiny", "--no-pretrained", "--activation", "0,5",
                            "--no-speed", "--json", "--out", str(out))
    assert code == 0, err
    report = json.loads(stdout)
    loaded = vitprune.load(out)
    assert [e.op for e in vitprune.get_recipe(loaded).edits] == ["remove_activation"] * 2
    assert report["after"]["params"] == count_macs(loaded).params < report["before"]["params"]


def test_attention_removal_on_convnext_is_one_line(capsys, tmp_path):
    code, _, err = run(capsys, "prune", "depth", "convnext_tiny", "--no-pretrained", "--attention", "0", "--no-speed",
                       "--out", str(tmp_path / "x"))
    assert_one_line_error(code, err, "depth pruning needs to remove attention sublayers, which vitprune cannot do on "
                                     "timm-convnext models")
    assert not (tmp_path / "x").exists()
