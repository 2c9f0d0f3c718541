"""``vitprune demo`` end to end on the embedded default (trained once per test session)."""

from __future__ import annotations

import json

import pytest
from test_cli import run

from vitprune.measure import count_macs


@pytest.mark.slow
def test_demo_reports_accuracy_macs_and_speed(capsys, trained_digits):
    code, out, _ = run(capsys, "demo", "--json", "--repeats", "3")
    data = json.loads(out)
    assert code == 0
    assert data["starting_checkpoint"].startswith("digits-vit")
    assert data["eval"]["top1"] >= 0.95 and data["eval"]["count"] == 360
    assert data["profile"]["macs"] == count_macs(trained_digits).macs and data["profile"]["convention"] == "full"
    assert data["linear_macs"] == count_macs(trained_digits, convention="linear").macs
    assert data["latency"]["batch_size"] == 1 and data["throughput"]["batch_size"] == 64
    assert data["latency"]["repeats"] == 3


@pytest.mark.slow
def test_demo_tables(capsys, trained_digits):
    code, out, _ = run(capsys, "demo", "--repeats", "3")
    assert code == 0
    assert "starting checkpoint" in out and "convention 'full'" in out and "images/s" in out
