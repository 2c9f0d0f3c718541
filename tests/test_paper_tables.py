"""benchmarks/paper_tables.py: its rounding rule, the HetDPT+ rows it reads (or asks for), a few cheap rows against
the implementation notes' derived counts, its reading of torch-pruning's count as HetDPT's code took it, and the page
it writes; DeiT-B is never built."""

from __future__ import annotations

import json
from types import ModuleType

import pytest
from conftest import benchmark_module, tracked

from vitprune.measure import CONVENTIONS, count_macs
from vitprune.surgery import prune_depth


@pytest.fixture(scope="module")
def pt() -> ModuleType:
    return benchmark_module("paper_tables")


def _ours(params: int, full: int, linear: int, tp: int | None = None) -> dict[str, int | None]:
    return {"params": params, "macs_full": full, "macs_linear": linear, "macs_tp": tp}


def test_within_rounding_follows_the_printed_precision(pt):
    rows = [pt._row("a", "12.0", "3.21", _ours(12_049_000, 3_214_000_000, 1), "full"),
            pt._row("b", "12.00", "3.21", _ours(12_049_000, 3_214_000_000, 1), "full"),
            pt._row("c", None, "3.2", _ours(1, 9, 3_249_000_000), "linear"),
            pt._row("d", "1.0", "1.0", None, "full")]
    pt._table("t", "MACs (G)", rows)
    assert [r["within_rounding"] for r in rows] == [True, False, True, None]
    assert rows[1]["delta"] == {"params_m": pytest.approx(0.049), "macs": pytest.approx(0.004)}
    assert rows[2]["delta"] == {"macs": pytest.approx(0.049)}  # the row's convention, not the other one


def test_hetdpt_plus_rows_read_the_budgets_results_or_ask_for_them(pt, tmp_path):
    missing = pt._hetdpt_plus_rows(tmp_path)
    assert [r["source"] for r in missing] == ["missing"] * len(pt.PLUS_PAPER)
    assert all(r["ours"] is None and r["note"].startswith("run hetdpt_plus_budgets.py first") for r in missing)

    rows = [{"paper_gmacs": g, "paper_params_m": p, "ratio": 0.5, "gmacs": g - 0.001, "gmacs_full": g + 0.2,
             "params_m": p - 0.2, "embed_dim": 300} for g, p in pt.PLUS_PAPER]
    report = {"date": "today", "model": pt.PLUS_MODEL, "depth": pt.PLUS_DEPTH, "rows": rows}
    (tmp_path / "hetdpt_plus_budgets.json").write_text(json.dumps(report))
    read = pt._hetdpt_plus_rows(tmp_path)
    assert [r["source"] for r in read] == ["hetdpt_plus_budgets.json"] * len(pt.PLUS_PAPER)
    gmacs, params = pt.PLUS_PAPER[0]
    expected = _ours(round((params - 0.2) * 1e6), round((gmacs + 0.2) * 1e9), round((gmacs - 0.001) * 1e9))
    assert read[0]["ours"] == expected
    assert read[0]["compare"] == "linear" and "hetdpt_plus_budgets.json (today)" in read[0]["note"]

    (tmp_path / "hetdpt_plus_budgets.json").write_text(json.dumps({**report, "model": "deit_base_patch16_224"}))
    assert all("another starting point" in r["note"] and r["ours"] is None for r in pt._hetdpt_plus_rows(tmp_path))


@pytest.mark.slow
def test_cheap_rows_match_the_notes_derived_counts(pt):
    hiap = pt._hiap_section()
    dense, described = hiap["tables"][0]["rows"]
    assert dense["ours"]["macs_full"] == 4_598_882_304 and dense["within_rounding"]  # notes/hiap.md Appendix A
    assert described["ours"]["macs_full"] < 3.0e9 < 3.1e9 and not described["within_rounding"]
    (cifar,) = hiap["tables"][1]["rows"]
    assert cifar["ours"]["macs_full"] == 182_849_664 and round(cifar["ours"]["macs_linear"] / 1e6, 1) == 173.1

    dense, pruned = pt._vbp_rows(pt._T, [(0.45, "4.12", "0.94")], ("5.72", "1.26"))
    assert pruned["ours"]["params"] == 5_717_416 - 4_148 * 385  # ceil(0.45 · 9216) neurons, notes/vbp.md §7
    assert pruned["within_rounding"] and not dense["within_rounding"] and "0.006 G above ours" in dense["note"]
    dense100, _ = pt._vbp_rows(pt._T, [(0.45, "4.12", "0.94")], ("5.72", "1.26"), num_classes=100, label=" (C)")
    assert "1000-class model's" in dense100["note"] and dense100["ours"]["params"] == 5_717_416 - 900 * 193
    assert dense["ours"]["macs_tp"] == count_macs(pt._base(pt._T), convention="tp").macs


@pytest.mark.slow
def test_hetdpt_deit_s_row_in_tp_as_its_code_counts(pt):
    """HetDPT's 6-layer DeiT-S (attention [1, 10, 11], GELU [8, 10, 11]): notes/hetdpt.md §1.8.4's params and linear
    MACs, and the printed 3.3 G in torch-pruning's count as HetDPT's code takes it; tp on timm's Attention is not."""
    ours = pt._depth(pt._distilled(pt._S), [1, 10, 11], [8, 10, 11])
    assert (ours["params"], ours["macs_linear"]) == (17_561_168, 3_299_358_720)
    assert round(ours["macs_tp_hetdpt"] / 1e9, 1) == 3.3 != round(ours["macs_tp"] / 1e9, 1)


def test_tp_as_hetdpt_is_the_linear_count_plus_norms_biases_and_gelus(pt):
    """With HetDPT's classes, torch-pruning counts no attention matmuls: the linear count, plus every LayerNorm at
    2 per element (two per block, one at the end), each GELU at 1 per element (the MLPs that keep theirs, the output
    GELU of a block that lost both), each Linear's bias once per call and the patch embedding's at each position."""
    model = tracked("deit_tiny_distilled_patch16_224", {"depth": 4})
    prune_depth(model, attention=[1, 3], activation=[2, 3], output_gelu=True)
    n, d, hidden, patches, classes = 198, 192, 768, 196, 1000
    norms = (2 * 4 + 1) * 2 * n * d
    gelus = 2 * n * hidden + n * d  # blocks 0 and 1 keep their GELU; block 3 lost both
    biases = 2 * (3 * d + d) + 2 * (hidden + d) + 2 * d + 2 * classes  # attention 0, 2; MLPs 0, 1; merged 2, 3; heads
    expected = count_macs(model).linear_macs + norms + gelus + biases + patches * d
    assert pt._tp_as_hetdpt(model) == expected


def test_markdown_bolds_the_compared_convention_and_lists_what_is_not_rebuilt(pt, tmp_path):
    rows = [pt._row("close", "12.0", "3.2", _ours(12_000_000, 3_210_000_000, 3_000_000_000, 3_220_000_000), "full"),
            pt._row("far", None, "174.0", _ours(2_000_000, 182_800_000, 173_100_000), "linear", "why"),
            pt._row("het", None, "11.8", {**_ours(1, 12_277_000_000, 11_796_000_000, 12_293_000_000),
                                          "macs_tp_hetdpt": 11_809_000_000}, "tp_hetdpt")]
    waiting = pt._hetdpt_plus_rows(tmp_path)
    report = {"date": "today", "seconds": 1.0,
              "papers": [{"paper": "HiAP", "note": "notes/hiap.md",
                          "tables": [pt._table("G table", "MACs (G)", rows[:1]),
                                     pt._table("M table", "MACs (M)", rows[1:2], unit="M"),
                                     pt._table("HetDPT's", "MACs (G)", rows[2:], columns=(*CONVENTIONS, "tp_hetdpt")),
                                     pt._table("waiting", "MACs (G)", waiting)],
                          "not_reproduced": pt._not_reproduced("HiAP")}]}
    page = pt.to_markdown(report)
    assert page.startswith("# Paper tables side by side\n")
    assert "| ours GMACs full | ours GMACs linear | ours GMACs tp | ours − paper |" in page
    assert "| close | 12.0 | 12.000 | 3.2 | **3.210** | 3.000 | 3.220 | ✓ params +0.000 M, MACs +0.010 G |  |" in page
    assert "| far | — | 2.000 | 174.0 | 182.8 | **173.1** | — | ✗ MACs -0.9 M | why |" in page
    assert "| ours GMACs tp | ours GMACs tp as HetDPT's code | ours − paper |" in page
    assert "| het | — | 0.000 | 11.8 | 12.277 | 11.796 | 12.293 | **11.809** | ✓ MACs +0.009 G |  |" in page
    assert f"{3 + len(waiting)} configurations in the tables: 2 within rounding, 1 beyond it" in page
    assert f"{len(waiting)} waiting for `hetdpt_plus_budgets.py`" in page
    assert "HiAP (Ours) 2.5G: 12.3 M params, 2.5 GMACs;" in page and "Uniform-Ratio: 116.6 MMACs;" in page
