"""One writer per output: a run claims its ``--out`` for its process, a second process aiming at it is refused in one
line, and a claim a dead process left is recognised and taken over (the commands' side: tests/cli/test_claims.py)."""

from __future__ import annotations

import os
import signal

import pytest
from conftest import claim_holder

import vitprune
from vitprune.errors import VitpruneError
from vitprune.methods.depth import DepthConfig, run_depth
from vitprune.runs import MethodData, RunContext
from vitprune.runs.claim import claim_file, claimed


def test_a_run_refuses_an_out_another_process_holds_and_takes_over_a_dead_ones(tmp_path):
    out = tmp_path / "same"
    model = vitprune.create_model("digits-vit", depth=2)
    holder = claim_holder(out)
    try:
        with pytest.raises(VitpruneError, match=rf"{out} is in use by another run \(process {holder.pid} on .*\); "
                                                "wait for it to finish, or choose another --out"):
            run_depth(model, MethodData(), DepthConfig([0]), RunContext(out))
        assert not out.exists()
    finally:
        holder.send_signal(signal.SIGKILL)  # it dies holding the claim: its file stays, its lock goes
        holder.wait()
    assert f"process {holder.pid}" in claim_file(out).read_text()
    said = []
    report = run_depth(model, MethodData(), DepthConfig([0]), RunContext(out, log=said.append))
    assert report.out == str(out) and vitprune.load(out)
    assert said == [f"  taking over the claim on {out} left by process {holder.pid} on {os.uname().nodename}, which "
                    "ended without releasing it"]
    assert not claim_file(out).exists()  # released when the run ended


def test_claims_nest_within_a_process_and_are_released_on_error(tmp_path):
    out = tmp_path / "run"
    with claimed(out):
        with claimed(out):  # a chain's own step, a resumed stage: the same process goes on
            assert claim_file(out).exists()
        assert claim_file(out).exists()
    assert not claim_file(out).exists()
    with pytest.raises(RuntimeError), claimed(out):
        raise RuntimeError
    assert not claim_file(out).exists()
