"""LV-ViT on the command line: what it cannot do is one line naming the fix, with nothing written."""

from __future__ import annotations

from test_cli import assert_one_line_error, run


def test_without_weights_the_command_line_says_what_to_pass(capsys, tmp_path):
    code, _, err = run(capsys, "prune", "depth", "lvvit-m", "--attention", "0", "--no-speed", "--out",
                       str(tmp_path / "x"))
    assert_one_line_error(code, err, "vitprune downloads no weights for lvvit-m: pass --checkpoint")
    assert not (tmp_path / "x").exists()
