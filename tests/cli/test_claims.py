"""Two commands aimed at one --out: exactly one proceeds; the other says why in one line and changes nothing
(``vitprune.runs.claim``; the runs' side: tests/runs/test_claim.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import claim_holder
from test_cli import assert_one_line_error, run

import vitprune
from vitprune.runs.claim import claim_file


@pytest.mark.slow
def test_two_commands_started_on_one_out_leave_one_model_and_one_refusal(tmp_path):
    """Two ``vitprune prune depth`` processes aimed at one --out at once: exactly one saves (whichever claims it
    first, or finds it saved), the other says why in one line and changes nothing."""
    out = tmp_path / "same"
    commands = [[sys.executable, "-m", "vitprune", "prune", "depth", "digits-vit", "--no-pretrained", "--activation",
                 str(block), "--out", str(out), "--no-speed", "--json"] for block in (1, 2)]
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for command in commands]
    results = [(p.wait(), *p.communicate()) for p in processes]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    (saved,) = [json.loads(stdout) for code, stdout, _ in results if code == 0]
    (refused,) = [stderr for code, _, stderr in results if code != 0]
    assert_one_line_error(2, refused, rf"{out} (is in use by another run|already exists)")
    assert vitprune.get_recipe(vitprune.load(out)).edits[-1].args["block"] == saved["activation"][0]


def test_a_command_aimed_at_an_out_another_process_holds_is_one_line(capsys, tmp_path):
    out = tmp_path / "run"
    holder = claim_holder(out)
    try:
        code, _, err = run(capsys, "prune", "vbp", "digits-vit", "--no-pretrained", "--data", "digits", "--ratio",
                           "0.3", "--out", str(out), "--no-speed")
    finally:
        holder.stdin.close()
        holder.wait()
    assert_one_line_error(code, err, rf"{out} is in use by another run \(process {holder.pid} ")
    assert not out.exists() and not claim_file(out).exists()
