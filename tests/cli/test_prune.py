"""``vitprune prune depth``: the saved model is the pruned one, the report is exact, mistakes are one line."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import pytest
import torch
from test_cli import assert_one_line_error, run

import vitprune
from vitprune.measure import count_macs, format_count
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


@pytest.mark.slow
@pytest.mark.cli
def test_prune_merge_finishes_a_hetdpt_no_merge_model(capsys, tmp_path):
    """``prune hetdpt --no-merge`` saves fc1 and fc2 apart for a later fine-tune; ``prune merge``, in a fresh
    process, loads that recipe and merges them: the same function, one Linear per block."""
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=2)
    prune_depth(model, [0], [1], merge=False)
    with torch.no_grad():  # as if fine-tuned since
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    vitprune.save(model, tmp_path / "unmerged")
    merged_dir = tmp_path / "merged"
    result = subprocess.run([sys.executable, "-m", "vitprune", "prune", "merge", str(tmp_path / "unmerged"), "--out",
                             str(merged_dir), "--fold-norm", "--no-speed", "--json"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["merged_blocks"] == [1] and summary["fold_norm"] and summary["max_abs_difference"] <= 1e-5
    merged, unmerged = vitprune.load(merged_dir).eval(), vitprune.load(tmp_path / "unmerged").eval()
    x = torch.randn(4, *vitprune.get_adapter(model).input_size)
    with torch.no_grad():
        assert (merged(x) - unmerged(x)).abs().max().item() <= 1e-5
    last = vitprune.get_recipe(merged).edits[-1]
    assert (last.op, last.args) == ("merge_mlp", {"block": 1, "fold_norm": True})
    assert count_macs(merged).params == summary["after"]["params"] < summary["before"]["params"]
    code, _, err = run(capsys, "prune", "merge", str(merged_dir), "--out", str(tmp_path / "again"), "--no-speed")
    assert_one_line_error(code, err, "has no fc1·fc2 pair kept apart to merge")


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


def test_a_share_of_the_macs_and_its_count_prune_the_same_model(capsys, tmp_path):
    """--target-macs 60% and the MACs it stands for give the same model; the old spelling (GMACs) still does, and
    warns."""
    dense = count_macs(vitprune.create_model("digits-vit")).macs
    # MAC counts are whole: at most 60% of them is at most its whole part.
    count = math.floor(0.6 * dense)
    spellings = {"share": ["--target-macs", "60%"], "count": ["--target-macs", str(count)],
                 "old": ["--macs", f"{count / 1e9!r}"]}
    models, errors = {}, {}
    for name, spelled in spellings.items():
        code, _, errors[name] = run(capsys, "prune", "vbp", "digits-vit", "--no-pretrained", "--data", "digits",
                                    *spelled, "--calibration-images", "64", "--no-speed", "--json", "--out",
                                    str(tmp_path / name))
        assert code == 0, errors[name]
        models[name] = vitprune.load(tmp_path / name / "model").state_dict()
    assert all(torch.equal(models["share"][k], models[other][k]) for other in ("count", "old") for k in models["share"])
    assert count_macs(vitprune.load(tmp_path / "share" / "model")).macs <= count
    assert errors["share"] == errors["count"] == ""
    assert errors["old"].strip() == (f"warning: --macs {count / 1e9!r} is now --target-macs {format_count(count)}; "
                                     "the old spelling goes in the next release")


@pytest.mark.slow
def test_prune_vbp_baseline_with_fine_tuning_as_json(capsys, tmp_path):
    out = tmp_path / "run"
    code, stdout, _ = run(capsys, "prune", "vbp", "digits-vit", "--no-pretrained", "--data", "digits", "--ratio",
                          "0.3", "--criterion", "snip", "--no-compensate", "--calibration-images", "32",
                          "--epochs", "1", "--distill", "soft", "--lr", "5e-4", "--batch-size", "64",
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
    (["--ratio", "0"], r"the pruning ratio must be in \(0, 1\), got 0.0"),
    (["--ratio", "2"], r"the pruning ratio must be in \(0, 1\), got 2.0"),
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
    (["--rho", "0.7", "--target-macs", "100M"], "give exactly one of rho"),
    (["--rho", "0"], r"rho must be in \(0, 1\]"),
    (["--target-macs", "10K", "--acs-images", "4", "--attention-weight", "1"],
     r"STAR's keep-rate schedule cannot reach 10K MACs per image \(full convention\); the nearest it reaches, one "
     r"patch token in every block, is"),
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
    code, stdout, err = run(capsys, "prune", "hiap", "digits-vit", "--no-pretrained", "--data", "digits",
                            "--target-macs", "70%", "--epochs", "1", "--lr", "1e-3", "--speed-batch", "2",
                            "--out", str(out))
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert count_macs(vitprune.load(out / "model")).macs == report["pruned"]["macs_full"] <= 0.7 * dense_macs
    assert "epoch 1: MACs expected" in err and "0:" in err and "11:" in err  # the live per-block view
    # The live line's last epoch names the MACs the extraction then cut, not only the gates hardened at 0.
    last = [line for line in err.splitlines() if line.startswith("epoch 1: ")][-1]
    assert f"extracted now {format_count(report['macs_predicted'])} / target" in last
    assert "HiAP on digits-vit (starting checkpoint: digits-vit): target" in stdout
    assert "extracted architecture" in stdout and "MACs (full)" in stdout and "alternating pairs" in stdout
    assert (out / "architecture.png").exists() and str(out / "architecture.png") in stdout


@pytest.mark.parametrize("args, pattern", [
    (["--target-macs", "1G"], "the MAC target 1G is not below the model's .* there is nothing to prune"),
    (["--target-macs", "1K"], "HiAP cannot reach 1K MACs per image .*; the nearest it reaches is above what it "
                              "cannot prune"),
    (["--lambda-macro", "-1"], "the penalty weights λ must be >= 0"),
    (["--data", "/no/such/dir"], "/no/such/dir"),
], ids=["target-too-big", "target-too-small", "negative-lambda", "missing-data"])
def test_prune_hiap_user_errors(capsys, tmp_path, args, pattern):
    data = [] if "--data" in args else ["--data", "digits"]
    code, _, err = run(capsys, "prune", "hiap", "digits-vit", "--no-pretrained", "--epochs", "1", "--out",
                       str(tmp_path / "x"), *data, *args)
    assert_one_line_error(code, err, pattern)


# --- fine-tuning recipes: --preset, and a learning rate that follows the global batch ---------------------------


@pytest.fixture
def handed(monkeypatch):
    """The configs ``prune vbp``, ``prune star`` and ``prune hiap`` would hand their pipelines (nothing runs)."""
    from vitprune.cli import methods

    calls: dict = {}
    for method in ("vbp", "star"):
        monkeypatch.setattr(f"vitprune.methods.{method}.pipeline.run_{method}",
                            lambda model, data, config, ctx: calls.update(config=config))
    monkeypatch.setattr("vitprune.methods.hiap.pipeline.run_hiap",
                        lambda model, data, config, ctx: calls.update(config=config.config, train=config.train))
    monkeypatch.setattr(methods, "load_inputs", lambda *a, **k: (None, {"train": None, "val": None,
                                                                           "calibration": None}))
    monkeypatch.setattr(methods, "show_report", lambda *a: None)
    return calls


def _handed(capsys, method, *argv):
    code, out, err = run(capsys, "prune", method, "digits-vit", "--data", "digits", "--out", "unused", *argv)
    assert code == 0, err
    return out


@pytest.mark.parametrize("method, argv, key, lr, batch", [
    # The paper's recipes: VBP 1.5e-5 at batch 32; STAR 2e-5 per 512 images (8e-5 at 2048); HiAP 5e-5 at 256.
    ("vbp", ["--ratio", "0.5", "--epochs", "1"], "finetune", 1.5e-5, 32),
    ("vbp", ["--ratio", "0.5", "--epochs", "1", "-b", "64"], "finetune", 3e-5, 64),
    ("star", ["--rho", "0.7", "--epochs", "1", "-b", "512"], "finetune", 2e-5, 512),
    ("star", ["--rho", "0.7", "--epochs", "1"], "finetune", 8e-5 * 64 / 2048, 64),  # the CLI's batch 64
    ("hiap", ["--epochs", "1"], "train", 5e-5, 256),
    ("hiap", ["--epochs", "1", "-b", "64"], "train", 1.25e-5, 64),
], ids=["vbp", "vbp-batch", "star-batch", "star-cpu-batch", "hiap", "hiap-batch"])
def test_a_changed_batch_scales_the_recipes_learning_rate(capsys, handed, method, argv, key, lr, batch):
    """lr = base_lr x global batch / 512 (TrainConfig.at_batch) unless --lr is given; the command says which under
    its report."""
    out = " ".join(_handed(capsys, method, *argv).split())
    train = handed[key] if key == "train" else handed["config"].finetune
    assert (train.lr, train.batch_size) == (pytest.approx(lr, rel=1e-12), batch)
    how = "scaled with the batch" if "-b" in argv or method == "star" else "the recipe's"
    assert f"trained at lr {lr:.3g} for a global batch of {batch} ({how}; the recipe: " in out
    out = " ".join(_handed(capsys, method, *argv, "--lr", "1e-3").split())
    train = handed[key] if key == "train" else handed["config"].finetune
    assert (train.lr, train.batch_size) == (1e-3, batch)
    assert f"trained at lr 0.001 for a global batch of {batch} (given" in out


def test_a_preset_gives_the_fine_tuning_recipe(capsys, handed):
    from vitprune.training.presets import get_preset

    _handed(capsys, "vbp", "--ratio", "0.5", "--preset", "imagenet-vbp")
    config = handed["config"]
    assert config.finetune == get_preset("imagenet-vbp").train and config.distill == "soft"  # the paper distils
    _handed(capsys, "vbp", "--ratio", "0.5", "--preset", "imagenet-vbp", "--no-distill", "--epochs", "0")
    assert handed["config"].finetune is None and handed["config"].distill == "none"
    _handed(capsys, "star", "--rho", "0.7", "--preset", "imagenet-star", "--epochs", "2", "-b", "256",
            "--seed", "3")
    star = get_preset("imagenet-star").train
    assert handed["config"].finetune == dataclasses.replace(star.at_batch(256), epochs=2, seed=3)
    assert handed["config"].finetune.lr == pytest.approx(2e-5 * 256 / 512)
    _handed(capsys, "hiap", "--preset", "imagenet-hiap")
    assert handed["train"] == get_preset("imagenet-hiap").train


def test_hiap_needs_epochs_or_a_preset(capsys, handed):
    code, _, err = run(capsys, "prune", "hiap", "digits-vit", "--data", "digits", "--out", "unused")
    assert_one_line_error(code, err, "give --epochs, or --preset for a paper's recipe")


def test_an_unknown_preset_is_one_line(capsys, handed):
    code, _, err = run(capsys, "prune", "star", "digits-vit", "--data", "digits", "--out", "unused", "--rho", "0.7",
                       "--preset", "imagenet-deit")
    assert_one_line_error(code, err, "unknown training preset 'imagenet-deit' \\(choose from: imagenet-hetdpt, ")
