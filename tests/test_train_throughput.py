"""The committed training-throughput page is the script's rendering of its JSON, figures included."""

import json
from pathlib import Path

import pytest

from conftest import benchmark_module

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


@pytest.mark.parametrize("stem", sorted(p.stem for p in RESULTS.glob("train_throughput_*.json")))
def test_committed_page_matches_its_json(stem):
    module = benchmark_module("train_throughput")
    report = json.loads((RESULTS / f"{stem}.json").read_text())
    assert (RESULTS / f"{stem}.md").read_text() == module.to_markdown(report)
    for row in report["rows"]:
        assert row["min"] <= row["images_per_s"] <= row["max"]
        assert len(row["rounds"]) == report["rounds"]
