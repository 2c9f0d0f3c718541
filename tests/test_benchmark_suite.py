"""The benchmark suite's runner and its generated page: a full run replaces the results only when every job has
finished, a failed job leaves the previous results whole and names itself in one line, ``--resume`` skips finished
jobs, and the page and README excerpt are built from the results files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import report  # noqa: E402
import suite  # noqa: E402

_DIGITS = {
    "starting_checkpoint": "digits-vit (test)", "speed_batch": 8, "speed_pairs": 3,
    "finetune": {"epochs": 2, "distill": "soft"},
    "dense": {"top1": 0.975, "params": 1000, "macs_full": 20_000_000, "macs_linear": 16_000_000},
    "rows": [{"label": "VBP 30%", "family": "VBP", "top1": {"dense": 0.975, "pruned": 0.9, "finetuned": 0.95},
              "macs_full": 16_000_000, "speed": {"speedup": 1.234, "speedup_q1": 1.2, "speedup_q3": 1.3,
                                                  "context": {"device": "cpu", "dtype": "float32"}}}],
}


def _write_job(tmp_path: Path, name: str, body: str) -> str:
    script = tmp_path / f"{name}.py"
    script.write_text("import argparse, pathlib, sys\n"
                      "out = pathlib.Path(sys.argv[sys.argv.index('--out-dir') + 1])\n" + body)
    return str(script)


@pytest.fixture
def fake_suite(tmp_path, monkeypatch):
    """Two jobs writing one file each; the second fails while ``fail`` exists."""
    fail = tmp_path / "fail"
    jobs = [suite.Job("one", _write_job(tmp_path, "one", "(out / 'one.md').write_text('# One\\n')\n"), [], []),
            suite.Job("two", _write_job(tmp_path, "two", f"""
if pathlib.Path({str(fail)!r}).exists():
    sys.exit(3)
(out / 'two.md').write_text('# Two\\n')
"""), [], [])]
    monkeypatch.setattr(suite, "JOBS", jobs)
    out = tmp_path / "results"
    out.mkdir()
    (out / "old.md").write_text("# Old\n")
    return out, fail


def test_a_full_run_replaces_the_results_only_when_every_job_has_finished(fake_suite, capsys):
    out, fail = fake_suite
    fail.touch()
    with pytest.raises(SystemExit, match=r"^benchmark two failed \(exit status 3\); its output is in .*two\.log"):
        suite.main(["--out-dir", str(out), "--reuse-cache"])
    assert sorted(p.name for p in out.iterdir()) == ["old.md"]  # the previous results, untouched
    partial = out.with_name("results.partial")
    assert [job["name"] for job in json.loads((partial / suite.SUITE_FILE).read_text())["jobs"]] == ["one", "two"]

    fail.unlink()
    (partial / "one.md").write_text("# One, from the first attempt\n")
    suite.main(["--out-dir", str(out), "--reuse-cache", "--resume"])
    assert not partial.exists() and not out.with_name("results.old").exists()
    assert (out / "one.md").read_text() == "# One, from the first attempt\n"  # finished jobs are not run again
    assert not (out / "old.md").exists() and (out / "two.md").exists()
    record = json.loads((out / suite.SUITE_FILE).read_text())
    assert [(job["name"], job["returncode"], job["files"]) for job in record["jobs"]] == [("one", 0, ["one.md"]),
                                                                                            ("two", 0, ["two.md"])]
    assert record["seconds"] == pytest.approx(sum(job["seconds"] for job in record["jobs"]))
    page = (out / report.PAGE).read_text()
    assert "| One, from the first attempt | [md](one.md) | one |" in page and "| Two | [md](two.md) | two |" in page
    assert "--out-dir" not in page  # commands as a user would type them, not the temporary folder


def test_only_reruns_jobs_in_place(fake_suite):
    out, _ = fake_suite
    suite.main(["--out-dir", str(out), "--only", "two"])
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == ["README.md", "old.md", "suite.json", "two.md"]


def test_page_and_readme_excerpt_come_from_the_results_files(tmp_path):
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (results / "digits.json").write_text(json.dumps(_DIGITS))
    (results / "digits.md").write_text("# Every method on digits\n")
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{report.START}\nstale\n{report.END}\ntail\n")
    report.write_page(results, readme=readme)

    page = (results / report.PAGE).read_text()
    assert "| VBP 30% | 90.00 | 95.00 | 16.00 (1.25×) | 1.23× [1.20-1.30] |" in page
    assert "fine-tuned 2 epochs (soft distillation" in page and "batch 8" in page
    assert "No GPU results: this run had no GPU." in page  # no structural_cuda*.json among the results
    text = readme.read_text()
    assert "stale" not in text and text.startswith("intro\n") and text.endswith(f"{report.END}\ntail\n")
    assert "[digits.md](bench/results/digits.md)" in text and "| VBP 30% | 90.00 | 95.00 |" in text


def test_the_claims_pages_summary_leads_the_excerpt_from_its_report_alone(tmp_path):
    import claims_page

    def claim(claim_id: str, verdict: str, comparisons: int = 1) -> dict:
        difference = {"effect": 1.73, "low": 0.9, "high": 2.5}
        return {"id": claim_id, "verdict": verdict, "comparisons": [{"judged": True, "difference": difference}]
                * comparisons}

    claims = {"format": claims_page.FORMAT, "budget": {"seeds": list(range(6))}, "val_images": 4000,
              "command": "python benchmarks/claims.py --seeds 0 1 2 3 4 5", "seconds": {"measurements": 18_000},
              "threads": [2], "claims": [claim("recovery-control", "equivalent"), claim("hetdpt-step2", "holds"),
                                         claim("vbp-criterion", "does not hold", 2),
                                         claim("hetdpt-fig8-tome", "inconclusive")]}
    results = tmp_path / "results"
    results.mkdir()
    (results / "claims.json").write_text(json.dumps(claims))
    readme = tmp_path / "README.md"
    readme.write_text(f"{report.START}\n{report.END}\n")
    report.write_page(results, readme=readme)
    text = readme.read_text()
    assert "#### Each paper's claims on cluttered MNIST" in text and "[claims.md](results/claims.md)" in text
    assert "claim of HetDPT, VBP as its paper states it" in text and "(6 seeded checkpoints, 4,000 validation" in text
    assert "`python benchmarks/claims.py --seeds 0 1 2 3 4 5`, 300 min of measurements on 2 CPU threads" in text
    # each verdict lists its claims, a one-comparison claim with its difference, a speed claim without one
    assert ("Of 3 claims: holds 1 (HetDPT's Step 2 over transfer entropy alone, +1.7 [+0.9, +2.5]); does not hold 1 "
            "(VBP's variance over magnitude and SNIP); inconclusive 1 (HetDPT + ToMe faster than dense + ToMe "
            "(Fig. 8)).") in text
    assert "The dense + recovery control (equivalent) puts what the recovery costs a lossless model at +1.73 [+0.90, " \
           "+2.50] points." in text
    # an earlier format's report is not summarised
    (results / "claims.json").write_text(json.dumps({**claims, "format": 2}))
    assert "Each paper's claims" not in report.page(results)


def test_the_comparisons_summary_is_rendered_from_its_report_alone(tmp_path):
    def arm(name: str, title: str, target: str, top1: float | None, speedup: float | None,
            status: str = "done") -> dict:
        return {"arm": name, "title": title, "target": target, "status": status, "top1": top1, "speedup": speedup,
                "met": status == "done" or None}

    pick = {"macs-0.7": {"arm": "star", "top1": 86.9, "speedup": 1.126, "tolerance": 1.0},
            "speedup-1.5": {"arm": "hetdpt", "top1": 81.77, "speedup": 1.511, "tolerance": 1.0}}
    compared = {"model": "cluttered-mnist-vit", "targets": ["macs-0.7", "speedup-1.5"], "pick": pick,
                "seeds": [0, 1, 2], "dense": {"top1": 87.0}, "budget": {"name": "quick"}, "seconds": 3566.1,
                "speed": {"batch_size": 16, "runtimes": ["torch", "onnxruntime"], "device": "cpu", "threads": 2},
                "arms": [arm("hetdpt", "HetDPT", "macs-0.7", 83.07, 1.293),
                         arm("star", "STAR", "macs-0.7", 86.9, 1.126),
                         arm("hetdpt", "HetDPT", "speedup-1.5", 81.77, 1.511),
                         arm("star", "STAR", "speedup-1.5", None, None, "unreachable")]}
    results = tmp_path / "results"
    (results / "compare").mkdir(parents=True)
    (results / "compare" / "report.json").write_text(json.dumps(compared))
    readme = tmp_path / "README.md"
    readme.write_text(f"{report.START}\n{report.END}\n")
    report.write_page(results, readme=readme)
    text = readme.read_text()
    assert "#### Which method at a target" in text and "[compare/report.md](results/compare/report.md)" in text
    assert ("(dense 87.0% top-1; seeds 0, 1, 2) on the `quick` budget, timed at batch 16 in torch on cpu with 2 "
            "threads (`python benchmarks/compare_example.py`, 59.4 min). It recommends the fastest arm on target "
            "whose top-1 is shown to be at most 1 point below the best arm's: at 70% of the MACs STAR (86.9%, 1.13×; "
            "the fastest on target, HetDPT at 83.1% and 1.29×, is not shown within the tolerance); at 1.5× measured "
            "speedup HetDPT (81.8%, 1.51×), which `star` cannot reach.") in text


def test_commands_are_shown_as_a_user_would_type_them():
    assert suite._shown([sys.executable, "-c", "import a; a.b()"]) == "python -c 'import a; a.b()'"
    assert suite._shown([sys.executable, "-m", "vitprune", "analyze", "recovery", "--out", "/tmp/x"]) == (
        "vitprune analyze recovery")
    script = str(suite.HERE / "digits.py")
    assert suite._shown([sys.executable, script, "--epochs", "1", "--out-dir", "/tmp/x"]) == (
        "python benchmarks/digits.py --epochs 1")


def test_page_links_what_a_command_job_wrote_into_its_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ("recovery.json", "recovery.png", "notes.txt"):
        (tmp_path / "sub" / name).write_text("x")
    suite_record = {"date": "today", "protocol": "quick", "cpu": "Test CPU", "cpu_count": 2, "platform": "test",
                    "python": "3", "seconds": 60.0,
                    "jobs": [{"name": "recovery", "command": "vitprune analyze recovery digits-vit", "out": "sub",
                              "files": ["sub/gone.png", "sub/notes.txt", "sub/recovery.json", "sub/recovery.png"],
                              "seconds": 60.0, "returncode": 0}]}
    (tmp_path / suite.SUITE_FILE).write_text(json.dumps(suite_record))
    page = report.page(tmp_path)
    assert ("| vitprune analyze recovery digits-vit | [JSON](sub/recovery.json), [plot](sub/recovery.png) | recovery "
            "| 60 s |") in page
