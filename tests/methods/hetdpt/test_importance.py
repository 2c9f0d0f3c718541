"""Step 2: learnable importance removes exactly the requested layers, lowest score first, within each type."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

import vitprune
from vitprune.data import build_dataset
from vitprune.errors import VitpruneError
from vitprune.methods.hetdpt.importance import (
    default_milestones,
    interleaved_order,
    select_layers,
    select_layers_across_types,
)
from vitprune.training import TrainConfig

CONFIG = TrainConfig(epochs=1, lr=1e-3, batch_size=64, seed=0)  # 23 steps on the 1437 training digits


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=4)
    train = build_dataset("digits", "train", input_size=vitprune.get_adapter(model).input_size)
    return model, train


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_interleaved_order_starts_with_the_larger_target():
    assert interleaved_order(3, 5) == ["activation", "attention"] * 3 + ["activation"] * 2
    assert interleaved_order(2, 1) == ["attention", "activation", "attention"]
    assert interleaved_order(2, 2) == ["activation", "attention"] * 2
    assert interleaved_order(0, 0) == []


def test_default_milestones_spread_over_the_first_part_of_the_run():
    assert default_milestones(4, 100) == [12, 25, 38, 50]
    assert default_milestones(3, 2) == [1, 1, 1]
    # After the warm-up: the first removal comes once the learning rate has reached its peak.
    assert default_milestones(4, 100, warmup_steps=20) == [30, 40, 50, 60]
    assert min(default_milestones(2, 10, warmup_steps=10)) >= 10
    with pytest.raises(VitpruneError, match="prune_fraction"):
        default_milestones(3, 10, prune_fraction=0)


def test_removes_exactly_the_requested_layers_lowest_first_within_type(small):
    model, train = small
    before = _state(model)
    selection = select_layers(model, train, CONFIG, attention=1, activation=2, milestones=[3, 9, 15])
    assert len(selection.attention) == 1 and len(selection.activation) == 2
    assert [h["type"] for h in selection.history] == ["activation", "attention", "activation"]
    assert [h["step"] for h in selection.history] == [3, 9, 15]
    removed: set[str] = set()
    for h in selection.history:
        key = f"{h['type']}:{h['block']}"
        # Chosen from its own type only, among the layers still present, with the lowest score.
        assert {k.split(":")[0] for k in h["scores"]} == {h["type"]}
        assert not removed & set(h["scores"])
        assert h["scores"][key] == min(h["scores"].values())
        removed.add(key)
    assert sorted(selection.attention) == sorted(h["block"] for h in selection.history if h["type"] == "attention")
    gates_left = {k: len(scores) for k, scores in selection.importance.items()}
    assert gates_left == {"attention": 4, "activation": 4}
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the caller's model is untouched
    assert selection.model is not model


def test_candidates_restrict_the_choice(small):
    model, train = small
    selection = select_layers(model, train, CONFIG, attention=2, activation=1,
                              candidates={"attention": [1, 3]}, milestones=[2, 4, 6])
    assert sorted(selection.attention) == [1, 3]
    with pytest.raises(VitpruneError, match="cannot remove 3 attention layers: the model has 2 to choose from"):
        select_layers(model, train, CONFIG, attention=3, activation=0, candidates={"attention": [1, 3]})


def test_cross_type_baseline_compares_all_layers(small):
    model, train = small
    selection = select_layers_across_types(model, train, CONFIG, budget=3, milestones=[3, 9, 15])
    assert len(selection.attention) + len(selection.activation) == 3
    for h in selection.history:
        assert {k.split(":")[0] for k in h["scores"]} == {"attention", "activation"}
        assert h["scores"][f"{h['type']}:{h['block']}"] == min(h["scores"].values())
    with pytest.raises(VitpruneError, match="between 1 and the 8 layers"):
        select_layers_across_types(model, train, CONFIG, budget=9)


def test_late_milestones_still_reach_the_target(small):
    model, train = small
    selection = select_layers(model, train, CONFIG, attention=1, activation=1, milestones=[500, 600])
    assert len(selection.attention) == len(selection.activation) == 1
    assert [h["step"] for h in selection.history] == [23, 23]
    with pytest.raises(VitpruneError, match="give 2 milestones in increasing order"):
        select_layers(model, train, CONFIG, attention=1, activation=1, milestones=[5])


def test_no_layer_goes_during_the_warm_up(small):
    """Default milestones start after the warm-up: a removal while the learning rate is still rising would judge
    layers by importance scores that have barely moved."""
    model, train = small
    config = replace(CONFIG, epochs=2, warmup_epochs=1)
    selection = select_layers(model, train, config, attention=1, activation=1)
    warmup = math.ceil(len(train) / config.batch_size)  # one epoch of steps
    assert all(h["step"] > warmup for h in selection.history)
