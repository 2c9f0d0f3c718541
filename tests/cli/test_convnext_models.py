"""ConvNeXt on the command line: activation removal runs and saves; what needs attention is one line."""

from __future__ import annotations

import json

from test_cli import assert_one_line_error, run

import vitprune
from vitprune.measure import count_macs


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
