"""Swin on the command line, as a user with their own images runs it: VBP, depth pruning, width pruning of heads and
neurons and HiAP run and save (HiAP on ConvNeXt too); STAR (no [CLS] token) and pruning the stages' widths are one
line, with nothing written."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import CONVNEXT_TINY, SWIN_TINY
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
    ("hetdpt+", ["--budget", "2", "--macs", "0.001"], "step 2 \\(width\\): width pruning needs to prune embedding "
                                                      "channels, which vitprune cannot do on timm-swin models"),
], ids=["star", "hetdpt+"])
def test_methods_swin_cannot_take_are_one_line(capsys, tmp_path, folder, saved, command, options, message):
    code, _, err = run(capsys, "prune", command, saved, "--data", str(folder), "--no-speed", "--out",
                       str(tmp_path / "x"), *options)
    assert_one_line_error(code, err, message)
    assert not (tmp_path / "x").exists()


def test_width_pruning_keeps_the_stage_widths(capsys, tmp_path, saved):
    """Heads and neurons at a ratio below 0.5 (where Torch-Pruning's own Swin example breaks); the stages' widths
    cannot be pruned, so --embed is one line with nothing written."""
    out = tmp_path / "pruned"
    code, stdout, err = run(capsys, "prune", "width", saved, "--ratio", "0.3", "--heads", "--no-embed", "--no-speed",
                            "--json", "--out", str(out))
    assert code == 0, err
    loaded = vitprune.load(out)
    assert {e.op for e in vitprune.get_recipe(loaded).edits} == {"prune_heads", "prune_mlp_neurons"}
    assert json.loads(stdout)["after"]["macs_full"] == count_macs(loaded).macs
    code, _, err = run(capsys, "prune", "width", saved, "--ratio", "0.3", "--embed", "--no-speed", "--out",
                       str(tmp_path / "x"))
    assert_one_line_error(code, err, "width pruning needs to prune embedding channels, which vitprune cannot do on "
                                     "timm-swin models")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("name, kwargs", [("swin_tiny_patch4_window7_224", SWIN_TINY), ("convnext_tiny", CONVNEXT_TINY)],
                         ids=["swin", "convnext"])
def test_prune_hiap_runs_on_staged_families(capsys, tmp_path, folder, name, kwargs):
    """HiAP gates Swin's heads whole (no per-head value widths) and only ConvNeXt's FFNs (no attention)."""
    torch.manual_seed(0)
    model = vitprune.create_model(name, **{**kwargs, "num_classes": len(CLASSES)})
    vitprune.save(model, tmp_path / "model")
    dense = count_macs(model).macs
    out = tmp_path / "run"
    code, stdout, err = run(capsys, "prune", "hiap", str(tmp_path / "model"), "--data", str(folder), "--macs",
                            str(0.8 * dense / 1e9), "--epochs", "1", "--lr", "1e-2", "--batch-size", "8", "--no-speed",
                            "--json", "--out", str(out))
    assert code == 0, err
    report = json.loads(stdout)
    final = vitprune.load(out / "model")
    assert count_macs(final).macs == report["pruned"]["macs_full"] <= 0.8 * dense
    ops = {e.op for e in vitprune.get_recipe(final).edits}
    assert ops <= {"prune_heads", "prune_mlp_neurons"} and "prune_mlp_neurons" in ops
