"""Figures the docs state are derived from code: each is read from its page and recomputed."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import build

from vitprune.measure import count_macs

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _stated(page: str, label: str) -> int:
    """The integer the page states as ``label`` (``- `label` = 1,234 MACs``)."""
    match = re.search(rf"- `{label}` = ([\d,]+) MACs", (DOCS / page).read_text())
    assert match, f"{page} states no {label} figure"
    return int(match.group(1).replace(",", ""))


def test_measurement_page_states_deit_s_as_counted():
    model = build("deit_small_patch16_224", {})
    for convention in ("linear", "full", "tp"):
        assert _stated("measurement.md", convention) == count_macs(model, convention=convention).macs
