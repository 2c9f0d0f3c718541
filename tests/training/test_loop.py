"""fit() and evaluate(): exact metrics on known logits, learning on a tiny problem, seeding, output."""

from __future__ import annotations

import math
import random

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from vitprune.data import build_loader
from vitprune.errors import VitpruneError
from vitprune.training import evaluate, fit

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


def _blobs_loader(seed: int = 0):
    """Two well-separated Gaussian blobs in 2-D, 32 points each."""
    gen = torch.Generator().manual_seed(seed)
    centers = torch.tensor([[-2.0, 0.0], [2.0, 0.0]])
    labels = torch.arange(2).repeat_interleave(32)
    points = centers[labels] + 0.5 * torch.randn(64, 2, generator=gen)
    return build_loader(TensorDataset(points, labels), 16, shuffle=True, seed=seed)


def _tiny_model(dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 16), nn.GELU(), nn.Dropout(dropout), nn.Linear(16, 2))


def test_fit_learns_a_tiny_problem():
    model, loader = _tiny_model(), _blobs_loader()
    before = evaluate(model, loader)
    history = fit(model, loader, epochs=10, lr=0.05, weight_decay=0.0, progress=False)
    after = evaluate(model, loader)
    assert [h["epoch"] for h in history] == list(range(1, 11))
    assert set(history[0]) == {"epoch", "loss", "top1", "lr"}
    assert history[-1]["loss"] < history[0]["loss"] / 2
    assert after["loss"] < before["loss"] / 4
    assert after["top1"] == 1.0


def test_fit_schedule_is_per_step_warmup_then_cosine():
    history = fit(_tiny_model(), _blobs_loader(), epochs=2, lr=0.01, warmup_epochs=1, progress=False)
    # The end of warmup is the cosine's half-way point when warmup is not a prefix; it ends at zero.
    assert history[0]["lr"] == pytest.approx(0.005)
    assert history[1]["lr"] == 0.0


def test_fit_is_reproducible_for_a_seed():
    def train(seed):
        model = _tiny_model(dropout=0.5)
        fit(model, _blobs_loader(), epochs=2, lr=0.01, seed=seed, progress=False)
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    assert torch.equal(train(3), train(3))
    assert not torch.equal(train(3), train(4))


def test_fit_leaves_global_rngs_untouched():
    model, loader = _tiny_model(dropout=0.5), _blobs_loader()
    torch.manual_seed(123)
    random.seed(123)
    expected = (torch.rand(3), random.random())
    torch.manual_seed(123)
    random.seed(123)
    fit(model, loader, epochs=1, lr=0.01, seed=7, progress=False)
    assert torch.equal(torch.rand(3), expected[0]) and random.random() == expected[1]


@pytest.mark.parametrize("training", [True, False])
def test_fit_restores_mode(training):
    model = _tiny_model().train(training)
    fit(model, _blobs_loader(), epochs=1, lr=0.01, progress=False)
    assert model.training is training


def test_fit_is_silent_without_progress(capfd):
    fit(_tiny_model(), _blobs_loader(), epochs=2, lr=0.01, progress=False)
    assert capfd.readouterr() == ("", "")


def test_fit_progress_goes_to_stderr(capfd):
    fit(_tiny_model(), _blobs_loader(), epochs=2, lr=0.01, progress=True)
    out, err = capfd.readouterr()
    assert out == ""
    assert "epoch 2/2" in err and "loss" in err and "acc" in err


def test_fit_rejects_zero_epochs():
    with pytest.raises(VitpruneError, match=r"^epochs must be at least 1, got 0$"):
        fit(_tiny_model(), _blobs_loader(), epochs=0, lr=0.01, progress=False)


def test_fit_rejects_an_empty_loader():
    empty = build_loader(TensorDataset(torch.zeros(0, 2), torch.zeros(0, dtype=torch.long)), 4, shuffle=False, seed=0)
    with pytest.raises(VitpruneError, match=r"^cannot train on an empty dataset$"):
        fit(_tiny_model(), empty, epochs=1, lr=0.01, progress=False)
