"""evaluate(): exact metrics on known logits, mode restored, clear error on empty input."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from vitprune.errors import VitpruneError
from vitprune.training import evaluate

# Class probabilities of every sample, highest first: logits are their logs, so the loss is -log p[target].
PROBS = [0.35, 0.25, 0.15, 0.12, 0.08, 0.05]
# Ranks 1, 2, 6, 1, 5: two top-1 hits, four top-5 hits.
TARGETS = [0, 1, 5, 0, 4]


class FixedLogits(nn.Module):
    """Returns row ``i`` of a fixed table for input ``i``; has no parameters."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("logits", logits)

    def forward(self, index: torch.Tensor) -> torch.Tensor:
        return self.logits[index]


def _fixed_loader(num_classes: int, targets: list[int]):
    probs = torch.tensor(PROBS[:num_classes])
    model = FixedLogits(probs.log().expand(len(targets), -1).clone())
    index, target = torch.arange(len(targets)), torch.tensor(targets)
    return model, [(index[:3], target[:3]), (index[3:], target[3:])]


def test_evaluate_exact_metrics():
    model, loader = _fixed_loader(6, TARGETS)
    metrics = evaluate(model, loader)
    assert set(metrics) == {"top1", "top5", "loss", "count"}
    assert metrics["count"] == 5
    assert metrics["top1"] == 2 / 5
    assert metrics["top5"] == 4 / 5
    assert metrics["loss"] == pytest.approx(-sum(math.log(PROBS[t]) for t in TARGETS) / 5, rel=1e-6)


def test_evaluate_per_image_hits_in_loader_order():
    model, loader = _fixed_loader(6, TARGETS)
    metrics = evaluate(model, loader, per_image=True)
    assert metrics["correct"].tolist() == [True, False, False, True, False]  # ranks 1, 2, 6, 1, 5
    assert metrics["top1"] == int(metrics["correct"].sum()) / 5


def test_evaluate_omits_top5_below_five_classes():
    model, loader = _fixed_loader(3, [0, 2, 1, 0, 0])
    metrics = evaluate(model, loader)
    assert set(metrics) == {"top1", "loss", "count"}
    assert metrics["top1"] == 3 / 5


@pytest.mark.parametrize("training", [True, False])
def test_evaluate_restores_mode(training):
    model, loader = _fixed_loader(6, TARGETS)
    model.train(training)
    evaluate(model, loader)
    assert model.training is training


def test_evaluate_empty_loader():
    model, _ = _fixed_loader(6, TARGETS)
    with pytest.raises(VitpruneError, match=r"^cannot evaluate on an empty dataset$"):
        evaluate(model, [])
