"""The baselines choose what they claim: greedy single-type TE, and one joint TE ranking (TE-static)."""

from __future__ import annotations

import copy

import pytest
import torch

import vitprune
from vitprune.data import balanced_subset, build_dataset, build_loader
from vitprune.errors import VitpruneError
from vitprune.methods.hetdpt import rank_layers, transfer_entropy
from vitprune.methods.hetdpt.baselines import greedy_te, te_static
from vitprune.surgery import prune_depth


@pytest.fixture(scope="module")
def setting():
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=4)
    train = build_dataset("digits", "train", input_size=vitprune.get_adapter(model).input_size, is_training=False)
    batches = list(build_loader(balanced_subset(train, 96, seed=0), 32, shuffle=False, seed=0))
    return model, batches


@pytest.mark.parametrize("kind", ["attention", "activation"])
def test_greedy_te_removes_the_least_te_layer_each_round(setting, kind):
    model, batches = setting
    attention, activation = greedy_te(model, kind, 2, batches)
    chosen = attention if kind == "attention" else activation
    assert (attention if kind == "activation" else activation) == [] and len(chosen) == 2
    work = copy.deepcopy(model)
    expected = []
    for _ in range(2):
        scores = transfer_entropy(work, kind, batches)
        block = min(scores, key=lambda b: (scores[b], b))
        prune_depth(work, **{kind: [block]}, merge=False)
        expected.append(block)
    assert chosen == sorted(expected)
    assert vitprune.get_recipe(model).edits == []  # the caller's model is not pruned


def test_te_static_takes_the_lowest_of_one_joint_ranking(setting):
    model, batches = setting
    attention, activation = te_static(model, 3, batches)
    ranking = rank_layers(model, batches)[:3]
    chosen = {("attention", b) for b in attention} | {("activation", b) for b in activation}
    assert chosen == {(k, b) for k, b, _ in ranking} and len(attention) + len(activation) == 3


def test_budget_beyond_the_type_is_an_error(setting):
    model, batches = setting
    with pytest.raises(VitpruneError, match="cannot remove 5 attention layers: the model has 4"):
        greedy_te(model, "attention", 5, batches)
