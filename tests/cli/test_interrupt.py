"""Ctrl-C ends a run with one line naming what it left and the exact command that continues it, and exit 130."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
import torch

import vitprune
from vitprune.cli.app import INTERRUPTED, _interrupted


@pytest.mark.slow
@pytest.mark.cli
def test_sigint_on_finetune_exits_130_and_the_printed_command_finishes_the_run(tmp_path):
    torch.manual_seed(0)
    vitprune.save(vitprune.create_model("digits-vit", depth=2), tmp_path / "model")
    out = tmp_path / "run"
    args = ["finetune", str(tmp_path / "model"), "--data", "digits", "--epochs", "8", "--checkpoint-every", "5",
            "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "400"}
    # A foreground run: under a shell's background job (`pytest &`) SIGINT arrives ignored, and Python keeps it so.
    proc = subprocess.Popen([sys.executable, "-m", "vitprune", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not (out / "checkpoint").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == INTERRUPTED, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"interrupted: {out} holds checkpoint/")
    again = shlex.split(last.split("continue with: ", 1)[1])
    assert again == ["vitprune", *args, "--resume"]
    assert not (out / "model").exists()  # nothing looks finished
    done = subprocess.run([sys.executable, "-m", "vitprune", *again[1:]], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert vitprune.load(out / "model") is not None


def test_an_interrupted_command_without_resume_says_interrupted(capsys):
    assert _interrupted(["profile", "deit_tiny_patch16_224"]) == INTERRUPTED
    assert capsys.readouterr().err.strip() == "interrupted"


@pytest.mark.parametrize("wrote, left, added", [
    (False, "nothing was written to {out} yet", []),
    (True, "{out} holds checkpoint/, metrics.jsonl", ["--resume"]),
], ids=["nothing-written", "checkpoint"])
def test_an_interrupted_run_names_what_its_out_holds(tmp_path, capsys, wrote, left, added):
    """A run stopped before it wrote anything is started again as it was; one that wrote something is resumed."""
    out = tmp_path / "run"
    if wrote:
        (out / "checkpoint").mkdir(parents=True)
        (out / "metrics.jsonl").write_text("")
    args = ["finetune", "model", "--data", "digits", "--out", str(out)]
    assert _interrupted(args) == INTERRUPTED
    again = shlex.join(["vitprune", *args, *added])
    assert capsys.readouterr().err.strip() == f"interrupted: {left.format(out=out)}; continue with: {again}"
