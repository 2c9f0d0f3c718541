"""``vitprune chain`` and ``vitprune prune hetdpt+``: a chain file run end to end, its report, and its mistakes."""

from __future__ import annotations

import json

import pytest
from test_cli import assert_one_line_error, run

import vitprune
from vitprune.measure import count_macs

pytest.importorskip("torch_pruning")

OPTIONS = ("--data", "digits", "--no-pretrained", "--repeats", "3", "--speed-batch", "2")


@pytest.mark.slow
def test_chain_file_runs_and_reports_every_step(capsys, tmp_path, monkeypatch):
    from vitprune.cli.app import console

    monkeypatch.setattr(console, "width", 200)
    steps = tmp_path / "chain.json"
    steps.write_text(json.dumps([{"method": "depth", "attention": [0, 5], "activation": [3]},
                                 {"method": "width", "ratio": 0.2, "heads": 1.0, "head_dims": 0.0}]))
    code, stdout, _ = run(capsys, "chain", "digits-vit", "--steps", str(steps), "--out", str(tmp_path / "run"),
                          "--no-onnx", "--json", *OPTIONS)
    assert code == 0
    report = json.loads(stdout)
    assert [s["method"] for s in report["steps"]] == ["start", "depth", "width"]
    assert report["consistency"]["ok"] and report["model"] == "digits-vit"
    final = vitprune.load(tmp_path / "run" / "model")
    assert count_macs(final).macs == report["steps"][-1]["macs_full"] == report["pruned"]["macs_full"]
    assert {e.op for e in vitprune.get_recipe(final).edits} >= {"remove_attention", "remove_activation", "prune_heads"}
    # The human-readable form: one row per step and the consistency verdict.
    code, stdout, _ = run(capsys, "chain", "digits-vit", "--steps", str(steps), "--out", str(tmp_path / "run"),
                          "--resume", "--no-onnx", *OPTIONS)
    assert code == 0
    assert "consistent: MACs" in stdout and "chain (depth → width)" in stdout
    assert [line.split("│")[2].strip() for line in stdout.splitlines() if line.startswith("│ ")][:3] == [
        "start", "depth", "width"]


@pytest.mark.parametrize("content, pattern", [
    ("[{", r"chain file .* is not valid JSON"),
    ('[{"method": "depth", "attention": [0]}, {"method": "width"}]',
     r"step 2: give exactly one of ratio and target_macs"),
    ('[{"method": "star", "rates": [1, 0.5, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], "alpha": 1}, {"method": "width", '
     '"ratio": 0.2}]',
     r"step 2 \(width\): blocks.1 reduces tokens; prune width before tokens"),
])
def test_chain_mistakes_are_one_line(capsys, tmp_path, content, pattern):
    steps = tmp_path / "chain.json"
    steps.write_text(content)
    code, _, err = run(capsys, "chain", "digits-vit", "--steps", str(steps), "--out", str(tmp_path / "run"),
                       "--no-onnx", "--json", *OPTIONS)
    assert_one_line_error(code, err, pattern)


def test_missing_chain_file_is_one_line(capsys, tmp_path):
    code, _, err = run(capsys, "chain", "digits-vit", "--steps", str(tmp_path / "none.json"), "--out",
                       str(tmp_path / "run"), *OPTIONS)
    assert_one_line_error(code, err, r"chain file .*none.json does not exist")


def test_hetdpt_plus_mistakes_are_one_line(capsys, tmp_path):
    base = ("prune", "hetdpt+", "digits-vit", "--out", str(tmp_path / "run"), "--json", *OPTIONS)
    code, _, err = run(capsys, *base, "--budget", "30", "--target-macs", "10M")
    assert_one_line_error(code, err, r"step 1 \(hetdpt\): budget 30 is out of range")
    # The failed run made nothing, so it left no directory: the corrected command needs no --resume.
    assert not (tmp_path / "run").exists()
    code, _, err = run(capsys, *base, "--budget", "4", "--split", "1,1", "--target-macs", "10M")
    assert_one_line_error(code, err, r"step 1 \(hetdpt\): split 1,1 removes 2 layers, not the budget of 4")


@pytest.mark.slow
def test_hetdpt_plus_runs_depth_and_its_recovery_then_width_then_one_fine_tune(capsys, tmp_path):
    target = 0.45 * count_macs(vitprune.create_model("digits-vit")).macs
    code, stdout, _ = run(capsys, "prune", "hetdpt+", "digits-vit", "--budget", "4", "--split", "2,2", "--target-macs",
                          str(int(target)), "--search-epochs", "1", "--epochs", "1", "--out", str(tmp_path / "run"),
                          "--json", *OPTIONS)
    assert code == 0
    report = json.loads(stdout)
    assert [s["method"] for s in report["steps"]] == ["start", "hetdpt", "width", "finetune"]
    # HetDPT's own Stage 2 (--epochs 1) recovered the depth-pruned model before width pruning ranked it.
    assert report["steps"][1]["summary"]["top1"]["finetuned"] == report["steps"][1]["top1"]
    assert (tmp_path / "run" / "steps" / "01-hetdpt" / "finetune").is_dir()
    assert 0.97 * target <= report["pruned"]["macs_full"] <= target
    assert report["steps"][3]["summary"]["distill"] == "soft"  # the digits preset's self-distillation
    assert report["consistency"]["ok"] and report["consistency"]["onnx_max_diff"] <= 1e-4


def test_a_failed_consistency_check_exits_non_zero_and_keeps_the_report(capsys, tmp_path, monkeypatch):
    """The report says INCONSISTENT and the exit status says so too; what was made stays for inspection."""
    import vitprune.runs.chain as chain
    from vitprune.consistency import Consistency

    def drifting(model, **_kwargs):
        return Consistency(macs_counted=10, macs_padding=0, macs_flop_counter=10, round_trip_max_diff=0.5,
                           architecture_rebuilt=True, onnx_max_diff=None, onnx_skipped="not asked for")

    monkeypatch.setattr(chain, "check_consistency", drifting)
    steps = tmp_path / "chain.json"
    steps.write_text(json.dumps([{"method": "depth", "attention": [0]}]))
    code, stdout, err = run(capsys, "chain", "digits-vit", "--steps", str(steps), "--out", str(tmp_path / "run"),
                            "--no-onnx", "--no-speed", "--json", *OPTIONS)
    assert_one_line_error(code, err, r"the final model failed its consistency check \(save/load changes the outputs "
                                     r"by up to 5\.0e-01\); the model and .*run/report\.json are kept for inspection")
    assert json.loads(stdout)["consistency"]["ok"] is False
    assert json.loads((tmp_path / "run" / "report.json").read_text())["consistency"]["ok"] is False
    assert vitprune.load(tmp_path / "run" / "model") is not None


def test_a_chain_that_fails_before_making_anything_leaves_no_directory(capsys, tmp_path):
    """The corrected command then runs without --resume."""
    steps = tmp_path / "chain.json"
    steps.write_text(json.dumps([{"method": "hetdpt", "budget": 30, "split": [15, 15]}]))
    code, _, err = run(capsys, "chain", "digits-vit", "--steps", str(steps), "--out", str(tmp_path / "run"),
                       "--no-onnx", "--no-speed", "--json", *OPTIONS)
    assert_one_line_error(code, err, r"step 1 \(hetdpt\): budget 30 is out of range")
    assert not (tmp_path / "run").exists()
    steps.write_text(json.dumps([{"method": "depth", "attention": [0]}]))
    code, _, err = run(capsys, "chain", "digits-vit", "--steps", str(steps), "--out", str(tmp_path / "run"),
                       "--no-onnx", "--no-speed", "--json", *OPTIONS)
    assert code == 0, err
