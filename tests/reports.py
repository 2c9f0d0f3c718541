"""The checks every method's test makes of the report its run returned and wrote."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

from vitprune.recipe import read_document
from vitprune.runs.report import Report


def assert_written(report: Report, path: Path) -> None:
    """``report`` comes back from its JSON form unchanged, and ``path`` (the run's ``report.json``) holds exactly that
    form, its keys the report's fields in order."""
    cls = type(report)
    assert cls.from_dict(report.to_dict()) == report
    written = json.loads(path.read_text())
    assert list(written) == [f.name for f in fields(cls)]
    assert written == json.loads(json.dumps(report.to_dict()))


def assert_saved(report: Report, key: str) -> None:
    """``report`` (depth or width pruning's) comes back from its JSON form unchanged, and the model it saved holds
    that form but for the speed (timed after saving) under ``key`` in its metadata, its keys the report's fields in
    order."""
    cls = type(report)
    assert cls.from_dict(report.to_dict()) == report
    saved = read_document(report.out)["metadata"][key]
    assert list(saved) == [f.name for f in fields(cls) if f.name != "speed"]
    assert {**saved, "speed": report.speed} == json.loads(json.dumps(report.to_dict()))
