"""benchmarks/digits.py: the page and plots it writes from a report, without training anything."""

from __future__ import annotations

from types import ModuleType

import pytest
from conftest import benchmark_module


@pytest.fixture(scope="module")
def digits() -> ModuleType:
    return benchmark_module("digits")


def _row(label: str, family: str, pruned: float, tuned: float, macs: int, speedup: float, tokens: list[int],
         consistent: bool = True) -> dict:
    context = {"device": "cpu", "dtype": "float32", "device_name": "Test CPU", "threads": 2, "torch": "2.x"}
    return {"label": label, "family": family, "top1": {"dense": 0.9778, "pruned": pruned, "finetuned": tuned},
            "params": 50_000, "macs_full": macs, "macs_linear": macs - 1_000_000, "consistent": consistent,
            "speed": {"speedup": speedup, "speedup_q1": speedup - 0.05, "speedup_q3": speedup + 0.05, "pairs": 3,
                      "context": context},
            "tokens": tokens, "seconds": 12.4}


@pytest.fixture
def report() -> dict:
    dense = [65] * 4
    return {"date": "today", "starting_checkpoint": "digits-vit (trained by vitprune on scikit-learn's digits)",
            "dense": {"top1": 0.9778, "params": 80_000, "macs_full": 26_000_000, "macs_linear": 20_000_000},
            "finetune": {"method": "finetune", "epochs": 3, "lr": 5e-4, "batch_size": 64, "distill": "soft"},
            "conventions": {"full": "linear + attention", "linear": "linear only"}, "speed_batch": 64,
            "speed_pairs": 3,
            "rows": [_row("VBP 30%", "VBP", 0.95, 0.97, 20_000_000, 1.1, dense),
                     _row("STAR 50% MACs", "STAR", 0.9, 0.96, 13_000_000, 1.4, [65, 65, 40, 20]),
                     _row("HetDPT k=8 → STAR 50% MACs", "chain", 0.5, 0.9, 13_000_000, 1.8, [65, 65, 30, 30],
                          consistent=False)]}


def test_markdown_names_the_budget_and_gives_one_row_per_variant(digits, report):
    page = digits.to_markdown(report)
    assert page.startswith("# Every method on the digits ViT at one fine-tuning budget\n")
    assert "Starting checkpoint: digits-vit (trained by vitprune on scikit-learn's digits); dense top-1 97.78%" in page
    assert "fine-tuned for 3 epochs (AdamW, lr 0.0005, batch 64, soft distillation" in page
    assert "3 alternating pairs at batch 64, float32 on cpu (Test CPU, 2 threads" in page
    assert "| VBP 30% | 95.00 | 97.00 | 50.0 | 20.00 | 19.00 | 1.300 | 1.100 [1.050-1.150] | yes | 12 |" in page
    assert "| STAR 50% MACs | 90.00 | 96.00 | 50.0 | 13.00 | 12.00 | 2.000 | 1.400 [1.350-1.450] | yes | 12 |" in page
    assert "| HetDPT k=8 → STAR 50% MACs | 50.00 | 90.00 |" in page and "| NO | 12 |" in page
    assert sum(line.startswith("| ") for line in page.splitlines()) == 1 + len(report["rows"])


def test_plots_are_written(digits, report, tmp_path):
    digits.plot_pareto(report, tmp_path / "pareto.png")
    digits.plot_star_tokens(report, tmp_path / "tokens.png")
    assert (tmp_path / "pareto.png").stat().st_size > 0 and (tmp_path / "tokens.png").stat().st_size > 0
