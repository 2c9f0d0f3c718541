"""timm's staged families on the command line, as a user with their own images runs them. ConvNeXt and Swin: VBP
and HiAP run and save. ConvNeXt: activation removal runs; everything that needs attention or tokens is one line.
Swin: depth pruning and width pruning of heads and neurons run; STAR (no [CLS] token) and pruning the stages' widths
are one line. A refusal writes nothing."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import CONVNEXT_TINY, SWIN_TINY
from test_cli import CLASSES, assert_one_line_error, image_folder, run

import vitprune
from vitprune.measure import count_macs

#: Each family's tiny model (32 px), by the name the tests use.
FAMILIES = {"convnext": ("convnext_tiny", CONVNEXT_TINY), "swin": ("swin_tiny_patch4_window7_224", SWIN_TINY)}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return image_folder(tmp_path_factory.mktemp("images"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A family's tiny model for the user's three classes, saved once per family: a MODEL every command takes."""
    paths: dict[str, str] = {}

    def save(family: str) -> str:
        if family not in paths:
            name, kwargs = FAMILIES[family]
            torch.manual_seed(0)
            model = vitprune.create_model(name, **{**kwargs, "num_classes": len(CLASSES)})
            path = tmp_path_factory.mktemp("saved") / family
            vitprune.save(model, path)
            paths[family] = str(path)
        return paths[family]

    return save


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_prune_vbp_runs(capsys, tmp_path, folder, saved, family):
    out = tmp_path / "run"
    code, stdout, err = run(capsys, "prune", "vbp", saved(family), "--data", str(folder), "--ratio", "0.5",
                            "--calibration-images", "9", "--no-speed", "--json", "--out", str(out))
    assert code == 0, err
    report = json.loads(stdout)
    final = vitprune.load(out / "model")
    assert report["pruned"]["params"] == count_macs(final).params < report["dense"]["params"]
    assert {e.op for e in vitprune.get_recipe(final).edits} == {"prune_mlp_neurons"}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_prune_hiap_runs(capsys, tmp_path, folder, saved, family):
    """HiAP gates Swin's heads whole (no per-head value widths) and only ConvNeXt's FFNs (no attention)."""
    model = saved(family)
    dense = count_macs(vitprune.load(model)).macs
    out = tmp_path / "run"
    code, stdout, err = run(capsys, "prune", "hiap", model, "--data", str(folder), "--target-macs", "80%",
                            "--epochs", "1", "--lr", "1e-2", "--batch-size", "8", "--no-speed", "--json", "--out",
                            str(out))
    assert code == 0, err
    report = json.loads(stdout)
    final = vitprune.load(out / "model")
    assert count_macs(final).macs == report["pruned"]["macs_full"] <= 0.8 * dense
    ops = {e.op for e in vitprune.get_recipe(final).edits}
    assert ops <= {"prune_heads", "prune_mlp_neurons"} and "prune_mlp_neurons" in ops


@pytest.mark.parametrize("family, command, options, message", [
    ("convnext", "star", ["--rho", "0.7"], "STAR needs to prune or merge tokens and propagate LRP relevance through "
                                           "its blocks, which vitprune cannot do on timm-convnext models"),
    ("convnext", "hetdpt", ["--budget", "2"], "HetDPT needs to remove attention sublayers"),
    # A chain refuses before any step runs, naming the step.
    ("convnext", "hetdpt+", ["--budget", "2", "--target-macs", "1M"], "step 1 \\(hetdpt\\): HetDPT needs to remove "
                                                                  "attention sublayers"),
    ("swin", "star", ["--rho", "0.7"], r"STAR needs to prune or merge tokens and propagate LRP relevance through its "
                                       r"blocks, which vitprune cannot do on timm-swin models: Swin's windows and "
                                       r"patch merging need the whole token grid; Swin has no \[CLS\] token"),
    ("swin", "tome", ["--r", "2"], r"ToMe needs to prune or merge tokens, which vitprune cannot do on timm-swin "
                                   r"models: Swin's windows and patch merging need the whole token grid"),
    ("convnext", "tome", ["--r", "2"], "ToMe needs to prune or merge tokens, which vitprune cannot do on "
                                       "timm-convnext models"),
    ("swin", "hetdpt+", ["--budget", "2", "--target-macs", "1M"], "step 2 \\(width\\): width pruning needs to prune "
                                                              "embedding channels, which vitprune cannot do on "
                                                              "timm-swin models"),
], ids=["convnext-star", "convnext-hetdpt", "convnext-hetdpt+", "swin-star", "swin-tome", "convnext-tome",
         "swin-hetdpt+"])
def test_methods_a_family_cannot_take_are_one_line(capsys, tmp_path, folder, saved, family, command, options,
                                                   message):
    code, _, err = run(capsys, "prune", command, saved(family), "--data", str(folder), "--no-speed", "--out",
                       str(tmp_path / "x"), *options)
    assert_one_line_error(code, err, message)
    assert not (tmp_path / "x").exists()


def test_convnext_width_pruning_takes_ffn_neurons_alone(capsys, tmp_path, saved):
    """Heads and stream channels are refused in one line that says how to do without them; without them, width
    pruning cuts FFN neurons and the result passes the consistency check."""
    from vitprune.consistency import check_consistency

    code, _, err = run(capsys, "prune", "width", saved("convnext"), "--ratio", "0.3", "--no-speed", "--out",
                       str(tmp_path / "x"))
    assert_one_line_error(code, err, r"width pruning needs to prune heads and head dimensions and prune embedding "
                                     r"channels, which vitprune cannot do on timm-convnext models; --heads 0 "
                                     r"--head-dims 0 .* keeps every head whole; --no-embed .* keeps the residual "
                                     r"stream whole$")
    assert not (tmp_path / "x").exists()
    code, stdout, err = run(capsys, "prune", "width", saved("convnext"), "--ratio", "0.3", "--heads", "0",
                            "--head-dims", "0", "--no-embed", "--no-speed", "--json", "--out", str(tmp_path / "x"))
    assert code == 0 and err == ""  # nor torch-pruning's warning about the layer scales
    loaded = vitprune.load(tmp_path / "x")
    assert {e.op for e in vitprune.get_recipe(loaded).edits} == {"prune_mlp_neurons"}
    report = json.loads(stdout)
    assert report["after"]["macs_full"] == count_macs(loaded).macs < report["before"]["macs_full"]
    assert check_consistency(loaded, onnx=False).ok


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


def test_prune_depth_removes_swin_attention_and_activations(capsys, tmp_path, saved):
    out = tmp_path / "pruned"
    code, stdout, err = run(capsys, "prune", "depth", saved("swin"), "--attention", "1,3", "--activation", "0,5",
                            "--no-speed", "--json", "--out", str(out))
    assert code == 0, err
    report = json.loads(stdout)
    loaded = vitprune.load(out)
    assert [e.op for e in vitprune.get_recipe(loaded).edits] == ["remove_attention"] * 2 + ["remove_activation"] * 2
    assert report["after"]["params"] == count_macs(loaded).params < report["before"]["params"]


def test_swin_width_pruning_keeps_the_stage_widths(capsys, tmp_path, saved):
    """Heads and neurons at a ratio below 0.5 (where Torch-Pruning's own Swin example breaks); the stages' widths
    cannot be pruned, so --embed is one line with nothing written."""
    out = tmp_path / "pruned"
    code, stdout, err = run(capsys, "prune", "width", saved("swin"), "--ratio", "0.3", "--heads", "1", "--head-dims",
                            "0", "--no-embed", "--no-speed", "--json", "--out", str(out))
    assert code == 0, err
    loaded = vitprune.load(out)
    assert {e.op for e in vitprune.get_recipe(loaded).edits} == {"prune_heads", "prune_mlp_neurons"}
    assert json.loads(stdout)["after"]["macs_full"] == count_macs(loaded).macs
    code, _, err = run(capsys, "prune", "width", saved("swin"), "--ratio", "0.3", "--embed", "--no-speed", "--out",
                       str(tmp_path / "x"))
    assert_one_line_error(code, err, "width pruning needs to prune embedding channels, which vitprune cannot do on "
                                     "timm-swin models; --no-embed")
    assert not (tmp_path / "x").exists()
