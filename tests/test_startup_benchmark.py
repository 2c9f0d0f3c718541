"""The committed startup page is the script's rendering of its JSON, each median that of its runs."""

import json
import statistics
from pathlib import Path

from conftest import benchmark_module

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def test_committed_page_matches_its_json():
    module = benchmark_module("startup")
    report = json.loads((RESULTS / "startup.json").read_text())
    assert (RESULTS / "startup.md").read_text() == module.to_markdown(report)
    assert [row["command"] for row in report["results"]] == list(module.COMMANDS)
    for row in report["results"]:
        assert len(row["cpu_s"]) == len(row["wall_s"]) == report["runs"]
        assert row["median_cpu_s"] == statistics.median(row["cpu_s"])
        assert row["median_wall_s"] == statistics.median(row["wall_s"])
