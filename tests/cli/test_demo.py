"""``vitprune demo`` end to end on the embedded default: measure it, prune it with HetDPT, compare."""

from __future__ import annotations

import json

import pytest
from test_cli import run

import vitprune
from vitprune.measure import SpeedConfig, count_macs


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory):
    return tmp_path_factory.mktemp("demo") / "out"


@pytest.mark.slow
def test_demo_measures_prunes_and_compares(capsys, trained_digits, demo_out):
    # Four layers, not the demo's eight: the same stages, half of Step 1's sweeps.
    code, out, _ = run(capsys, "demo", "--json", "--repeats", "3", "--budget", "4", "--out", str(demo_out))
    data = json.loads(out)
    assert code == 0
    assert data["starting_checkpoint"].startswith("digits-vit")
    assert data["eval"]["top1"] >= 0.95 and data["eval"]["count"] == 360
    assert data["profile"]["macs"] == count_macs(trained_digits).macs and data["profile"]["convention"] == "full"
    assert data["linear_macs"] == count_macs(trained_digits, convention="linear").macs
    assert data["latency"]["batch_size"] == 1 and data["throughput"]["batch_size"] == SpeedConfig().batch_size
    assert data["latency"]["repeats"] == 3 and data["hetdpt"]["speed"]["pairs"] == 3
    hetdpt = data["hetdpt"]
    assert hetdpt["budget"] == 4 and len(hetdpt["attention"]) + len(hetdpt["activation"]) == 4
    assert hetdpt["split"]["chosen_by"] == "predictor" and hetdpt["top1"]["dense"] == data["eval"]["top1"]
    pruned = vitprune.load(demo_out / "model")
    assert count_macs(pruned).params == hetdpt["pruned"]["params"] < hetdpt["dense"]["params"]
    assert (demo_out / "predictor.png").read_bytes().startswith(b"\x89PNG")
    assert hetdpt["top1"]["finetuned"] >= 0.9  # recovered on the 360 validation digits


@pytest.mark.slow
def test_demo_tables_reuse_the_finished_run(capsys, trained_digits, demo_out, monkeypatch):
    from vitprune.cli.app import console

    monkeypatch.setattr(console, "width", 200)
    code, out, _ = run(capsys, "demo", "--repeats", "3", "--budget", "4", "--out", str(demo_out))
    assert code == 0
    assert "starting checkpoint" in out and "convention 'full'" in out and "images/s" in out
    assert "HetDPT on digits-vit" in out and "chosen by predictor" in out and "speedup" in out
