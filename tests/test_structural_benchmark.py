"""benchmarks/structural.py: the variants it builds on DeiT-T and the report it writes, without timing anything."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from conftest import benchmark_module

import vitprune
from vitprune.measure import collect_context, count_macs


@pytest.fixture(scope="module")
def structural() -> ModuleType:
    return benchmark_module("structural")


@pytest.fixture(scope="module")
def built(structural):
    """DeiT-T's cheap variants: everything but the two width bisections."""
    torch.manual_seed(0)
    return structural.build("DeiT-T", ["depth", "vbp", "star", "hiap"], width_steps=1)


def test_rows_count_what_was_built(built):
    _, rows, models = built
    assert [r["variant"] for r in rows] == ["dense", "depth", "vbp", "star", "hiap"]
    by_variant = {r["variant"]: r for r in rows}
    for variant, model in models.items():
        row = by_variant[variant]
        assert row["macs_full"] == count_macs(model).macs
        assert row["mac_ratio_full"] == pytest.approx(by_variant["dense"]["macs_full"] / row["macs_full"])
        assert row["mac_ratio_full"] > 1 and row["mac_ratio_linear"] > 1
    assert "DeiT-S" in by_variant["depth"]["configuration"]  # DeiT-T borrows DeiT-S's layer sets


def test_variant_shapes(structural, built):
    _, rows, models = built
    views = vitprune.get_adapter(models["vbp"]).blocks()
    assert {v.mlp.hidden_features for v in views} == {384}
    hiap = {r["variant"]: r for r in rows}["hiap"]["details"]["kept"]
    assert hiap == {"heads": 2, "dims": 32, "early": 700, "late": 600}
    rates = {r["variant"]: r for r in rows}["star"]["details"]["keep_rates"]
    assert rates[0] == 1.0 and rates[-1] == pytest.approx(structural.STAR_RHO)


def test_report_markdown_and_plot(structural, built, tmp_path):
    _, rows, _ = built
    context = collect_context(torch.device("cpu"), torch.float32, 2).to_dict()
    for r in rows[1:]:
        # Stand-in speed figures: the layout is under test, not the machine.
        r |= {"speedup": 1.2, "speedup_q1": 1.1, "speedup_q3": 1.3, "speedup_over_mac_ratio": 1.2 / r["mac_ratio_full"],
              "other_load": 0.01, "a": {"context": context}}
    report = {"date": "now", "checkpoints": {"DeiT-T": rows[0]["checkpoint"]}, "environment": context,
              "batch_size": 2, "pairs": 1, "warmup": 0, "results": rows}
    markdown = structural.to_markdown(report)
    table = [line for line in markdown.splitlines() if line.startswith("| DeiT-T")]
    assert len(table) == len(rows)
    assert all(line.count("|") == 10 for line in table)
    assert structural.plot(report, tmp_path / "structural.png").stat().st_size > 0
