"""Step 2: learnable importance removes exactly the requested layers, lowest score first, within each type."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch
from torch import nn

import vitprune
from vitprune.data import balanced_subset, build_dataset
from vitprune.errors import VitpruneError
from vitprune.methods.hetdpt.importance import (
    default_milestones,
    interleaved_order,
    select_layers,
    select_layers_across_types,
    shortlist_size,
)
from vitprune.surgery import prune_depth, remove_depth_gates
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


@pytest.mark.slow
def test_candidates_restrict_the_choice(small):
    model, train = small
    selection = select_layers(model, train, CONFIG, attention=2, activation=1,
                              candidates={"attention": [1, 3]}, milestones=[2, 4, 6])
    assert sorted(selection.attention) == [1, 3]
    with pytest.raises(VitpruneError, match="cannot remove 3 attention layers: the model has 2 to choose from"):
        select_layers(model, train, CONFIG, attention=3, activation=0, candidates={"attention": [1, 3]})


@pytest.mark.slow
def test_cross_type_baseline_compares_all_layers(small):
    model, train = small
    selection = select_layers_across_types(model, train, CONFIG, budget=3, milestones=[3, 9, 15])
    assert len(selection.attention) + len(selection.activation) == 3
    for h in selection.history:
        assert {k.split(":")[0] for k in h["scores"]} == {"attention", "activation"}
        assert h["scores"][f"{h['type']}:{h['block']}"] == min(h["scores"].values())
    with pytest.raises(VitpruneError, match="between 1 and the 8 layers"):
        select_layers_across_types(model, train, CONFIG, budget=9)


@pytest.mark.slow
def test_late_milestones_still_reach_the_target(small):
    model, train = small
    selection = select_layers(model, train, CONFIG, attention=1, activation=1, milestones=[500, 600])
    assert len(selection.attention) == len(selection.activation) == 1
    assert [h["step"] for h in selection.history] == [23, 23]
    with pytest.raises(VitpruneError, match="give 2 milestones in increasing order"):
        select_layers(model, train, CONFIG, attention=1, activation=1, milestones=[5])


@pytest.mark.slow
def test_no_layer_goes_during_the_warm_up(small):
    """Default milestones start after the warm-up: a removal while the learning rate is still rising would judge
    layers by importance scores that have barely moved."""
    model, train = small
    config = replace(CONFIG, epochs=2, warmup_epochs=1)
    selection = select_layers(model, train, config, attention=1, activation=1)
    warmup = math.ceil(len(train) / config.batch_size)  # one epoch of steps
    assert all(h["step"] > warmup for h in selection.history)


@pytest.mark.parametrize("output_gelu", [False, True], ids=["paper", "output-gelu"])
def test_the_search_trains_the_function_the_pruned_model_has(small, output_gelu):
    """With ``output_gelu`` (the reference code's GELU after a block that lost both layers), the gated copy Step 2
    trains applies it as the pruned model will; without it (the paper's block), nowhere."""
    model, train = small
    selection = select_layers(model, balanced_subset(train, 128, seed=0), CONFIG, attention=1, activation=1,
                              candidates={"attention": [0], "activation": [0]}, output_gelu=output_gelu,
                              milestones=[1, 2])
    assert (selection.attention, selection.activation) == ([0], [0])
    gated = selection.model.eval()
    pruned = copy.deepcopy(gated)
    remove_depth_gates(pruned)
    prune_depth(pruned, [0], [0], output_gelu=output_gelu, merge=False)
    assert isinstance(vitprune.get_adapter(pruned).block(0).act, nn.GELU) == output_gelu
    x = torch.randn(4, *vitprune.get_adapter(model).input_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(gated(x), pruned(x), rtol=1e-5, atol=1e-5)


#: The reference code's hard-coded Step-2 candidate lists (train_stage1_step2.py, per the implementation note).
REFERENCE_CANDIDATES = {"activation": [9, 10, 11, 8, 7, 4, 6, 1], "attention": [1, 11, 9, 10, 8, 7, 6, 5]}


def test_shortlist_size_is_the_reference_share_but_never_too_few():
    # 8 of 12 blocks per type, as the reference code's lists; in proportion at other depths, rounded.
    assert {len(blocks) for blocks in REFERENCE_CANDIDATES.values()} == {shortlist_size(2 / 3, 12, 5)} == {8}
    assert [shortlist_size(2 / 3, layers, 1) for layers in (1, 2, 3, 4, 6, 24)] == [1, 1, 2, 3, 4, 16]
    assert shortlist_size(2 / 3, 12, 10) == 10  # Step 2 must find the layers it removes among them
    assert shortlist_size(1, 12, 3) == 12 and shortlist_size(0.1, 12, 0) == 1
    for share in (0, 1.5):
        with pytest.raises(VitpruneError, match=r"shortlist share must be in \(0, 1\]"):
            shortlist_size(share, 12, 1)
