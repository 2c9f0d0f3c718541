"""HiAP's gates and cost model: sampling law, straight-through gradient, annealing, exact dense cost, gradients."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import build, tracked

import vitprune
from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.measure import count_macs
from vitprune.methods.hiap import (
    HiAPGates, LayerShape, cost_penalty, dense_cost, feasibility, gate_cost, gumbel_sigmoid, layer_shapes, temperature,
    unit_costs,
)
from vitprune.surgery import prune_depth


@pytest.mark.parametrize("tau", [2.0, 0.5])
def test_a_hard_gate_is_one_with_probability_sigmoid_of_its_logit(tau):
    logits = torch.tensor([-1.5, 0.0, 0.3, 2.0]).repeat(200_000, 1)
    samples = gumbel_sigmoid(logits, tau, generator=torch.Generator().manual_seed(0))
    assert set(samples.unique().tolist()) <= {0.0, 1.0}
    torch.testing.assert_close(samples.mean(0), torch.sigmoid(logits[0]), rtol=0, atol=4e-3)


def test_straight_through_gradient_is_the_soft_samples():
    logits = torch.tensor([0.4, -0.2, 1.0], requires_grad=True)
    hard = gumbel_sigmoid(logits, 0.7, generator=torch.Generator().manual_seed(1))
    hard.sum().backward()
    soft = gumbel_sigmoid(logits.detach(), 0.7, hard=False, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(logits.grad, soft * (1 - soft) / 0.7)
    assert torch.equal(hard.detach(), (soft > 0.5).float())
    with pytest.raises(VitpruneError, match="temperature must be positive"):
        gumbel_sigmoid(logits, 0.0)


def test_temperature_anneals_exponentially_from_2_to_0_5():
    assert temperature(0, 201) == 2.0
    assert temperature(100, 201) == pytest.approx(1.0)
    assert temperature(200, 201) == pytest.approx(0.5) and temperature(500, 201) == pytest.approx(0.5)
    assert temperature(50, 201) == pytest.approx(2.0 * 0.25 ** 0.25)


@pytest.mark.parametrize("name, kwargs", [("deit_small_patch16_224", {}), ("deit_tiny_patch16_224", {"depth": 3}),
                                          ("vit_small_patch14_dinov2", {"depth": 2, "img_size": 98})])
@pytest.mark.parametrize("cost_model", ["paper", "exact"])
def test_all_gates_open_cost_the_dense_macs(name, kwargs, cost_model):
    model = tracked(name, kwargs)
    shapes = layer_shapes(model)
    probabilities = HiAPGates(shapes).probabilities()
    ones = {k: [torch.ones_like(t, dtype=torch.float64) for t in v] for k, v in probabilities.items()}
    macro, micro = gate_cost(ones, shapes, cost_model)
    report = count_macs(model)
    static = sum(report.other.values())  # patch embedding and head: not prunable
    assert int(macro + micro) == dense_cost(shapes) == report.macs - static


def test_deit_small_unit_costs_are_the_papers_constants_in_macs():
    shape = LayerShape(tokens=197, dim=384, heads=6, head_dim=64, hidden=1536)
    assert [2 * c for c in unit_costs(shape, "paper")] == [34_016_384, 228_914, 302_592]  # note section 1.5 (FLOPs)
    assert unit_costs(shape, "exact")[1] - unit_costs(shape, "paper")[1] == 197 * 384  # the V row of a dimension


def test_expected_cost_gradient_matches_finite_differences():
    shapes = [LayerShape(tokens=5, dim=8, heads=2, head_dim=3, hidden=6), LayerShape(5, 8, 1, 3, 4)]
    gates = HiAPGates(shapes).double()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in gates.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))

    def total() -> torch.Tensor:
        macro, micro = gate_cost(gates.probabilities(), shapes, "paper")
        return 0.9 * macro + 0.45 * micro

    total().backward()
    for param in gates.parameters():
        flat = param.data.view(-1)
        for i in range(flat.numel()):
            old = flat[i].item()
            flat[i] = old + 1e-6
            up = total().item()
            flat[i] = old - 1e-6
            down = total().item()
            flat[i] = old
            assert param.grad.view(-1)[i].item() == pytest.approx((up - down) / 2e-6, rel=1e-6, abs=1e-6)


def test_hardened_gates_and_feasibility():
    shapes = [LayerShape(tokens=5, dim=8, heads=2, head_dim=4, hidden=10)]
    gates = HiAPGates(shapes, init=-1.0)
    hard = gates.hardened()
    assert all(not t.any() for family in hard.values() for t in family)
    penalty = feasibility(gates.probabilities(), min_heads=1.0, min_dims=0.5, min_neurons=0.5)
    p = torch.sigmoid(torch.tensor(-1.0)).item()
    assert penalty["head"].item() == pytest.approx((1 - 2 * p) ** 2)
    assert penalty["dim"].item() == pytest.approx(2 * p * (0.5 - p) ** 2)
    assert penalty["neuron"].item() == pytest.approx(p * (0.5 - p) ** 2)
    assert all(v.item() == 0 for v in feasibility(HiAPGates(shapes, init=3.0).probabilities()).values())
    assert math.isclose(float(gate_cost(hard, shapes)[0] + gate_cost(hard, shapes)[1]), 0.0)


def test_depth_pruned_blocks_are_not_gated():
    model = vitprune.track(build("deit_tiny_patch16_224", {"depth": 2}), "deit_tiny_patch16_224", depth=2)
    prune_depth(model, [1], [])
    with pytest.raises(UnsupportedArchitectureError, match="blocks.1"):
        layer_shapes(model)


def test_cost_penalty_is_the_expected_kept_share_weighted_by_lambda():
    shapes = [LayerShape(tokens=5, dim=8, heads=2, head_dim=4, hidden=10), LayerShape(5, 8, 2, 4, 10)]
    with torch.no_grad():
        open_all = HiAPGates(shapes, init=50.0).probabilities()  # sigma(50) == 1 in float32
        full = cost_penalty(open_all, shapes, lambda_macro=0.9, lambda_micro=0.45)
        half = cost_penalty(HiAPGates(shapes, init=0.0).probabilities(), shapes, lambda_macro=1.0, lambda_micro=1.0)
    assert float(full["macro"] + full["micro"]) == pytest.approx(1.0)
    assert float(full["loss"]) == pytest.approx(0.9 * float(full["macro"]) + 0.45 * float(full["micro"]))
    # p = 0.5 everywhere: heads cost half, dims and neurons (under their parent) a quarter.
    assert float(half["macro"]) == pytest.approx(float(full["macro"]) / 2)
    assert float(half["micro"]) == pytest.approx(float(full["micro"]) / 4)
