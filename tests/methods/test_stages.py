"""The pipelines' shared stages: a stage's value cached in the run directory for resuming."""

from __future__ import annotations

import json

from vitprune.methods.stages import cached


def test_cached_computes_writes_reads_back_and_recomputes_a_stale_file(tmp_path):
    path = tmp_path / "stage.json"
    computed = []

    def compute() -> dict:
        computed.append(len(computed))
        return {"value": len(computed)}

    def run(resume: bool, read=lambda: json.loads(path.read_text())) -> dict:
        return cached(path, resume, read, compute, lambda value: path.write_text(json.dumps(value)))

    assert run(resume=True) == {"value": 1}  # nothing to resume from: computed and written
    assert json.loads(path.read_text()) == {"value": 1}
    assert run(resume=True) == {"value": 1} and len(computed) == 1  # read back, not recomputed
    assert run(resume=False) == {"value": 2}  # without resume the file is not looked at
    assert run(resume=True, read=lambda: None) == {"value": 3}  # read found it stale: recomputed, overwritten
    assert json.loads(path.read_text()) == {"value": 3} and len(computed) == 3
