"""``vitprune prune depth``: the saved model is the pruned one, the report is exact, mistakes are one line."""

from __future__ import annotations

import json

import pytest
import torch
from test_cli import assert_one_line_error, run

import vitprune
from vitprune.measure import count_macs
from vitprune.recipe import read_document
from vitprune.surgery import prune_depth

TINY = "deit_tiny_patch16_224"


def test_prune_depth_saves_the_pruned_model_and_reports_both_conventions(capsys, tmp_path):
    out = tmp_path / "pruned"
    code, stdout, _ = run(capsys, "prune", "depth", TINY, "--no-pretrained", "--attention", "0,3", "--activation",
                          "2,11", "--out", str(out), "--no-speed", "--json")
    assert code == 0
    summary = json.loads(stdout)
    reference = vitprune.create_model(TINY)
    prune_depth(reference, [0, 3], [2, 11])
    dense = vitprune.create_model(TINY)
    assert summary["before"] == {"params": count_macs(dense).params, "macs_full": count_macs(dense).macs,
                                 "macs_linear": count_macs(dense, convention="linear").macs}
    assert summary["after"] == {"params": count_macs(reference).params, "macs_full": count_macs(reference).macs,
                                "macs_linear": count_macs(reference, convention="linear").macs}
    assert summary["attention"] == [0, 3] and summary["activation"] == [2, 11] and summary["speed"] is None
    loaded = vitprune.load(out)
    assert [e.op for e in vitprune.get_recipe(loaded).edits] == ["remove_attention"] * 2 + ["remove_activation"] * 2
    assert read_document(out)["metadata"]["prune_depth"]["after"] == summary["after"]
    assert count_macs(loaded).params == summary["after"]["params"]


def test_prune_depth_measures_the_speedup(capsys, tmp_path, monkeypatch):
    from vitprune.cli.app import console

    monkeypatch.setattr(console, "width", 200)
    out = tmp_path / "pruned"
    code, stdout, _ = run(capsys, "prune", "depth", "digits-vit", "--no-pretrained", "--attention", "1,2,3",
                          "--activation", "4,5", "--identity", "skip", "--fold-norm", "--out", str(out),
                          "--repeats", "3", "--speed-batch", "4")
    assert code == 0
    assert "MACs, full (with attention matmuls)" in stdout and "MACs, linear-only (no attention matmuls)" in stdout
    assert "alternating pairs" in stdout and "MAC ratio (full convention)" in stdout
    assert f"saved to {out} (starting checkpoint: digits-vit)" in stdout
    loaded = vitprune.load(out)
    assert vitprune.get_recipe(loaded).edits[0].args == {"block": 1, "identity": "skip"}
    x = torch.randn(2, *vitprune.get_adapter(loaded).input_size)
    with torch.no_grad():
        assert torch.isfinite(loaded(x)).all()


@pytest.mark.parametrize("args, pattern", [
    (["--attention", "3,12"], r"attention index 12 is out of range: the model has 12 blocks \(0-11\)"),
    (["--activation", "1,1"], "activation index 1 is given more than once"),
    (["--attention", "a,b"], "--attention takes comma-separated integers such as 0,3,7; got 'a,b'"),
    ([], "nothing to prune"),
], ids=["out-of-range", "duplicate", "not-integers", "nothing"])
def test_prune_depth_user_errors(capsys, tmp_path, args, pattern):
    code, _, err = run(capsys, "prune", "depth", TINY, "--no-pretrained", "--no-speed", "--out",
                       str(tmp_path / "x"), *args)
    assert_one_line_error(code, err, pattern)
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_prune_depth_rejects_a_gated_mlp(capsys, tmp_path):
    """SwiGLU has no activation whose removal would let the MLP merge: one line naming the module."""
    code, _, err = run(capsys, "prune", "depth", "aimv2_large_patch14_224", "--no-pretrained", "--no-speed",
                       "--activation", "0", "--out", str(tmp_path / "x"))
    assert_one_line_error(code, err, r"blocks\.0\.mlp is SwiGLU .*gated \(GLU/SwiGLU\) MLPs cannot be represented")


FAST_HETDPT = ["--epochs", "1", "--search-epochs", "1", "--probe-epochs", "1", "--batch-size", "64"]


@pytest.mark.slow
def test_prune_hetdpt_runs_and_reports(capsys, tmp_path, monkeypatch):
    from vitprune.cli.app import console

    monkeypatch.setattr(console, "width", 200)
    out = tmp_path / "run"
    code, stdout, _ = run(capsys, "prune", "hetdpt", "digits-vit", "--no-pretrained", "--data", "digits",
                          "--budget", "2", "--split", "1,1", "--distill", "none", "--out", str(out), *FAST_HETDPT)
    assert code == 0
    assert "budget 2 layers = 1 attention + 1 activation (chosen by user)" in stdout
    assert "MACs (full)" in stdout and "MACs (linear)" in stdout and "alternating pairs" in stdout
    assert f"saved the pruned model to {out / 'model'}" in stdout
    report = json.loads((out / "report.json").read_text())
    loaded = vitprune.load(out / "model")
    assert count_macs(loaded).params == report["pruned"]["params"]
    assert [e.op for e in vitprune.get_recipe(loaded).edits] == ["remove_attention", "remove_activation", "merge_mlp"]


@pytest.mark.parametrize("args, pattern", [
    (["--budget", "25"], r"budget 25 is out of range: the model has 12 attention and 12 activation layers"),
    (["--budget", "3", "--split", "1,1"], "split 1,1 removes 2 layers, not the budget of 3"),
    (["--budget", "2", "--split", "x"], "split takes 'auto' or two counts"),
    (["--budget", "2", "--data", "/no/such/dir"], "/no/such/dir"),
], ids=["budget-too-big", "split-sum", "split-form", "missing-data"])
def test_prune_hetdpt_user_errors(capsys, tmp_path, args, pattern):
    data = [] if "--data" in args else ["--data", "digits"]
    code, _, err = run(capsys, "prune", "hetdpt", "digits-vit", "--no-pretrained", "--out", str(tmp_path / "x"),
                       *data, *args)
    assert_one_line_error(code, err, pattern)


def test_prune_vbp_runs_and_reports(capsys, tmp_path, monkeypatch):
    from vitprune.cli.app import console

    monkeypatch.setattr(console, "width", 200)
    out = tmp_path / "run"
    code, stdout, _ = run(capsys, "prune", "vbp", "digits-vit", "--no-pretrained", "--data", "digits", "--ratio",
                          "0.5", "--calibration-images", "64", "--speed-batch", "4", "--out", str(out))
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    total = sum(report["widths_dense"].values())
    assert report["removed"] == total // 2
    assert (f"VBP on digits-vit (starting checkpoint: digits-vit): removed {total // 2} of {total} MLP hidden "
            "neurons (50%, ranked globally by variance), mean-shift compensation on") in stdout
    assert "MLP hidden width per block" in stdout and "right after pruning" in stdout
    assert "MACs (full)" in stdout and "MACs (linear)" in stdout and "alternating pairs" in stdout
    loaded = vitprune.load(out / "model")
    assert count_macs(loaded).params == report["pruned"]["params"]
    # The compensation changes fc2's bias only, so it travels in the weights; the recipe holds the slicing.
    assert {e.op for e in vitprune.get_recipe(loaded).edits} == {"prune_mlp_neurons"}
    assert read_document(out / "model")["metadata"]["vbp"] == {"ratio": 0.5, "criterion": "variance",
                                                                "compensate": True, "removed": total // 2}


@pytest.mark.slow
def test_prune_vbp_baseline_with_fine_tuning_as_json(capsys, tmp_path):
    out = tmp_path / "run"
    code, stdout, _ = run(capsys, "prune", "vbp", "digits-vit", "--no-pretrained", "--data", "digits", "--ratio",
                          "0.3", "--criterion", "snip", "--no-compensate", "--calibration-images", "32",
                          "--finetune-epochs", "1", "--distill", "--lr", "5e-4", "--batch-size", "64",
                          "--speed-batch", "2", "--out", str(out), "--json")
    assert code == 0
    report = json.loads(stdout)
    assert report["criterion"] == "snip" and report["compensate"] is False and report["model"] == "digits-vit"
    assert set(report["top1"]) == {"dense", "pruned", "finetuned", "finetune_best"}
    assert report["config"]["distill"] == "soft" and report["config"]["finetune"]["epochs"] == 1
    assert not (out / "statistics.safetensors").exists()
    assert [e.op for e in vitprune.get_recipe(vitprune.load(out / "model")).edits] == ["prune_mlp_neurons"] * len(
        [w for b, w in report["widths"].items() if w < report["widths_dense"][b]])


@pytest.mark.parametrize("args, pattern", [
    (["--ratio", "0"], r"the pruning ratio must be in \(0, 1\], got 0.0"),
    (["--ratio", "2"], r"the pruning ratio must be in \(0, 1\], got 2.0"),
    (["--ratio", "0.5", "--data", "/no/such/dir"], "/no/such/dir"),
    (["--ratio", "0.5", "--min-width", "200"], "cannot remove 50% of the neurons while keeping 200 per MLP"),
], ids=["ratio-zero", "ratio-too-big", "missing-data", "min-width"])
def test_prune_vbp_user_errors(capsys, tmp_path, args, pattern):
    data = [] if "--data" in args else ["--data", "digits"]
    code, _, err = run(capsys, "prune", "vbp", "digits-vit", "--no-pretrained", "--calibration-images", "16",
                       "--out", str(tmp_path / "x"), *data, *args)
    assert_one_line_error(code, err, pattern)


def test_prune_vbp_refuses_a_used_run_directory(capsys, tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "report.json").write_text("{}")
    code, _, err = run(capsys, "prune", "vbp", "digits-vit", "--no-pretrained", "--data", "digits", "--ratio", "0.5",
                       "--out", str(tmp_path / "x"))
    assert_one_line_error(code, err, "is not empty; pass --resume")


def test_prune_star_runs_and_reports(capsys, tmp_path, monkeypatch):
    from vitprune.cli.app import console

    monkeypatch.setattr(console, "width", 200)
    out = tmp_path / "run"
    code, stdout, _ = run(capsys, "prune", "star", "digits-vit", "--no-pretrained", "--data", "digits", "--rho", "0.6",
                          "--acs-images", "16", "--lrp-images", "4", "--classes", "2", "--speed-batch", "4",
                          "--anchor", "minmax", "--out", str(out))
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert "STAR on digits-vit (starting checkpoint: digits-vit): rho 0.6000, alpha 0.15" in stdout
    assert "keep rate per pruning block" in stdout and "right after pruning" in stdout
    assert "MACs (full)" in stdout and "alternating pairs" in stdout
    loaded = vitprune.load(out / "model")
    assert count_macs(loaded).macs == report["pruned"]["macs_full"] < report["dense"]["macs_full"]
    assert {e.op for e in vitprune.get_recipe(loaded).edits} == {"prune_tokens"}


@pytest.mark.parametrize("args, pattern", [
    ([], "give exactly one of rho"),
    (["--rho", "0.7", "--macs", "0.1"], "give exactly one of rho"),
    (["--rho", "0"], r"rho must be in \(0, 1\]"),
    (["--macs", "0.00001", "--acs-images", "4", "--alpha", "1"], "no keep-rate schedule reaches"),
    (["--rates", "1,0.5"], "2 keep rates for a model of 12 blocks"),
    (["--rates", "1,x"], "--rates takes comma-separated values"),
], ids=["no-target", "two-targets", "rho-zero", "macs-unreachable", "rates-length", "rates-form"])
def test_prune_star_user_errors(capsys, tmp_path, args, pattern):
    code, _, err = run(capsys, "prune", "star", "digits-vit", "--no-pretrained", "--data", "digits", "--out",
                       str(tmp_path / "x"), *args)
    assert_one_line_error(code, err, pattern)


@pytest.mark.slow
def test_prune_hiap_runs_shows_the_live_view_and_reports(capsys, tmp_path, monkeypatch):
    from vitprune.cli.app import console, err_console

    monkeypatch.setattr(console, "width", 200)
    monkeypatch.setattr(err_console, "width", 400)
    out = tmp_path / "run"
    dense_macs = count_macs(vitprune.create_model("digits-vit")).macs
    code, stdout, err = run(capsys, "prune", "hiap", "digits-vit", "--no-pretrained", "--data", "digits", "--macs",
                            str(0.7 * dense_macs / 1e9), "--epochs", "1", "--lr", "1e-3", "--speed-batch", "2",
                            "--out", str(out))
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert count_macs(vitprune.load(out / "model")).macs == report["pruned"]["macs_full"] <= 0.7 * dense_macs
    assert "epoch 1: MACs expected" in err and "0:" in err and "11:" in err  # the live per-block view
    assert "HiAP on digits-vit (starting checkpoint: digits-vit): target" in stdout
    assert "extracted architecture" in stdout and "MACs (full)" in stdout and "alternating pairs" in stdout
    assert (out / "architecture.png").exists() and str(out / "architecture.png") in stdout


@pytest.mark.parametrize("args, pattern", [
    (["--macs", "1"], "the MAC target 1G must lie between what HiAP cannot prune"),
    (["--lambda-macro", "-1"], "the penalty weights λ must be >= 0"),
    (["--data", "/no/such/dir"], "/no/such/dir"),
], ids=["target-too-big", "negative-lambda", "missing-data"])
def test_prune_hiap_user_errors(capsys, tmp_path, args, pattern):
    data = [] if "--data" in args else ["--data", "digits"]
    code, _, err = run(capsys, "prune", "hiap", "digits-vit", "--no-pretrained", "--epochs", "1", "--out",
                       str(tmp_path / "x"), *data, *args)
    assert_one_line_error(code, err, pattern)
