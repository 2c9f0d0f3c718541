"""``vitprune prune ...`` under ``torchrun --nproc_per_node 2`` (CPU, gloo) against one process: the same files,
written once, the same pruned model, and one report on stdout (the other rank prints nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch
import torch
from conftest import TORCHRUN_VARS, run_torchrun

import vitprune
from vitprune.recipe import WEIGHTS_FILE

#: Each command's arguments after MODEL (and --out), small enough for seconds per process on 2 cores.
COMMANDS = {
    "depth": ["prune", "depth", "{model}", "--attention", "0", "--activation", "1"],
    "vbp": ["prune", "vbp", "{model}", "--data", "digits", "--ratio", "0.5", "--calibration-images", "64",
            "--epochs", "1", "-b", "16"],
    "hetdpt": ["prune", "hetdpt", "{model}", "--data", "digits", "-k", "2", "--split", "1,1", "--preset", "digits",
               "--search-epochs", "1", "--epochs", "1", "-b", "16"],
    "hiap": ["prune", "hiap", "{model}", "--data", "digits", "--epochs", "1", "-b", "16"],
    "star": ["prune", "star", "{model}", "--data", "digits", "--rho", "0.7", "--attention-weight", "0.5", "--acs-images", "32",
             "--lrp-images", "16", "--epochs", "1", "-b", "16"],
    "width": ["prune", "width", "{model}", "--data", "digits", "-p", "0.3", "--importance", "taylor",
              "--taylor-batches", "3", "--taylor-batch-size", "16"],
}
# HetDPT+ (HetDPT then width, through the chain runner) is not repeated here (36 s): its two methods are above, and
# the chain runner under torchrun is test_compare_under_torchrun_matches_one_process's (every arm is a chain).


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> Path:
    """A two-block digits ViT saved by vitprune: every process loads the same weights."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("model") / "digits2"
    vitprune.save(vitprune.create_model("digits-vit", depth=2), path)
    return path


def _args(command: str, model: Path, out: Path) -> list[str]:
    return [a.format(model=model) for a in COMMANDS[command]] + ["--out", str(out), "--no-speed", "--json",
                                                                "--device", "cpu"]


def _one_process(args: list[str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}
    proc = subprocess.run([sys.executable, "-m", "vitprune", *args], env={**env, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_prune_command_under_torchrun_matches_one_process(command, saved_model, tmp_path):
    single = _one_process(_args(command, saved_model, tmp_path / "one"))
    multi = run_torchrun("-m", "vitprune", *_args(command, saved_model, tmp_path / "two"))
    # One JSON document: rank 1 printed nothing.
    one, two = json.loads(single.stdout), json.loads(multi.stdout)
    assert two.keys() == one.keys()
    assert _files(tmp_path / "two") == _files(tmp_path / "one")
    model_dir = Path(two["model_dir"]) if "model_dir" in two else Path(two["out"])
    reference_dir = Path(one["model_dir"]) if "model_dir" in one else Path(one["out"])
    weights = safetensors.torch.load_file(model_dir / WEIGHTS_FILE)
    reference = safetensors.torch.load_file(reference_dir / WEIGHTS_FILE)
    assert weights.keys() == reference.keys()
    # A fine-tune's ~90 AdamW steps turn rounding-sized gradient differences into updates of up to the lr (at most
    # 1.25e-4 here, so up to 1e-2 in all); one SGD step agrees to 1e-5 in tests/methods/*/test_*_distributed.py.
    # Depth and width pruning train nothing: the models agree to rounding.
    tolerance = 1e-6 if command in ("depth", "width") else 1e-3
    for name, value in reference.items():
        torch.testing.assert_close(weights[name], value, rtol=0, atol=tolerance, msg=name)
    assert two.get("top1", {}).get("dense") == one.get("top1", {}).get("dense")


@pytest.mark.slow
def test_a_user_mistake_under_torchrun_is_one_line_from_rank_0(saved_model, tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    with pytest.raises(AssertionError, match="torchrun failed") as failure:
        run_torchrun("-m", "vitprune", *_args("depth", saved_model, tmp_path / "taken"))
    assert str(failure.value).count("already exists; pass --overwrite") == 1


@pytest.mark.slow
def test_compare_under_torchrun_matches_one_process(saved_model, tmp_path):
    """``vitprune compare`` runs each arm as its chain runs under torchrun: the same files, written once, arms that
    agree with one process's, and one report on stdout."""
    args = ["compare", str(saved_model), "--data", "digits", "--target-macs", "0.7", "--arms", "vbp", "--epochs", "1",
            "--json", "--device", "cpu", "--speed-batch", "1", "--repeats", "3"]
    one = json.loads(_one_process([*args, "--out", str(tmp_path / "one")]).stdout)
    two = json.loads(run_torchrun("-m", "vitprune", *args, "--out", str(tmp_path / "two")).stdout)
    assert _files(tmp_path / "two") == _files(tmp_path / "one")
    assert [r["arm"] for r in two["arms"]] == [r["arm"] for r in one["arms"]] == ["vbp"]
    for key in ("macs", "params", "status", "met", "steps"):
        assert two["arms"][0][key] == one["arms"][0][key], key
    assert two["dense"] == one["dense"] and abs(two["arms"][0]["top1"] - one["arms"][0]["top1"]) <= 1.0
    for arm in ("dense/seed-0", "macs-0.7/vbp/seed-0"):
        weights = safetensors.torch.load_file(tmp_path / "two" / "arms" / arm / "model" / WEIGHTS_FILE)
        reference = safetensors.torch.load_file(tmp_path / "one" / "arms" / arm / "model" / WEIGHTS_FILE)
        assert weights.keys() == reference.keys()
        for name, value in reference.items():
            torch.testing.assert_close(weights[name], value, rtol=0, atol=1e-3, msg=name)
