"""HiAP's extraction: the smaller model equals the gated one under the same hardened gates, and counts right."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import CONVNEXT_TINY, HF_TINY, SWIN_TINY, tracked
from hypothesis import strategies as st
from strategies import EXAMPLES, images, property_test, small_vits

import vitprune
from vitprune.errors import VitpruneError
from vitprune.measure import count_macs, flop_counter_macs, value_padding_macs
from vitprune.methods.hiap import GatedForward, HiAPGates, dense_cost, gate_cost, layer_shapes
from vitprune.methods.hiap.extract import extract
from vitprune.methods.hiap.search import fixed_macs, hardened_macs, layer_summary


def _setting(name, kwargs, seed=0):
    model = tracked(name, kwargs)
    gates = HiAPGates(layer_shapes(model))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in gates.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) + 0.8)  # mostly open, some closed
        gates.head[1][:] = -1.0  # a layer without heads
        gates.block[2].fill_(-1.0)  # one without an FFN
        gates.block[0].fill_(1.0)  # and an open FFN without neurons, which outputs fc2's bias
        gates.neuron[0][:] = -1.0
        for name, p in model.named_parameters():  # timm starts biases at 0, which would hide the bias paths
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    return model, gates


def _gated_output(model, gates, x):
    """What ``model`` computes with ``gates`` hardened (the reference an extraction must equal)."""
    gated = GatedForward(model)
    gated.set(gates.hardened())
    with torch.no_grad():
        out = model(x)
    gated.remove()
    return out


HF_SMALL = {**HF_TINY, "num_hidden_layers": 3}
SPECS = [("deit_tiny_patch16_224", {"depth": 3}), ("vit_small_patch14_dinov2", {"depth": 3, "img_size": 56}),
         ("deit_small_distilled_patch16_224", {"depth": 3}), ("hf:ViTForImageClassification", HF_SMALL),
         ("hf:DeiTForImageClassificationWithTeacher", HF_SMALL)]


@pytest.mark.parametrize("name, kwargs", SPECS, ids=["deit", "dinov2-ls", "distilled", "hf_vit", "hf_deit_teacher"])
def test_extracted_model_equals_the_gated_model(name, kwargs):
    model, gates = _setting(name, kwargs)
    x = torch.randn(2, *vitprune.get_adapter(model).input_size, generator=torch.Generator().manual_seed(1))
    expected = _gated_output(model, gates, x)
    small = copy.deepcopy(model)
    kept = extract(small, gates)
    assert kept[1]["heads"] == [] and kept[2]["neurons"] == 0 and kept[0]["neurons"] == 0
    with torch.no_grad():
        torch.testing.assert_close(small(x), expected, rtol=1e-4, atol=1e-4)
    assert count_macs(small).params < count_macs(model).params


@pytest.mark.parametrize("name, kwargs", [SPECS[0], SPECS[3]], ids=["deit", "hf_vit"])
def test_extracted_macs_are_the_exact_cost_model_and_flop_counter(name, kwargs):
    model, gates = _setting(name, kwargs, seed=2)
    shapes = layer_shapes(model)
    report = count_macs(model)
    static = sum(report.other.values())
    macro, micro = gate_cost({k: [t.double() for t in v] for k, v in gates.hardened().items()}, shapes, "exact")
    small = copy.deepcopy(model)
    extract(small, gates)
    assert count_macs(small).macs == int(macro + micro) + static
    reference = flop_counter_macs(small, torch.randn(1, *vitprune.get_adapter(small).input_size))
    # The fused kernel runs A·V on values zero-padded to the query width; the MAC count leaves that padding out.
    padding = value_padding_macs(small)
    assert padding > 0
    assert reference == count_macs(small).macs + padding


@pytest.mark.parametrize("name, kwargs", [SPECS[0], SPECS[4]], ids=["deit", "hf_deit_teacher"])
def test_extracted_model_saves_and_loads(tmp_path, name, kwargs):
    model, gates = _setting(name, kwargs, seed=3)
    extract(model, gates)
    x = torch.randn(1, *vitprune.get_adapter(model).input_size)
    with torch.no_grad():
        out = model(x)
    vitprune.save(model, tmp_path / "m")
    loaded = vitprune.load(tmp_path / "m")
    with torch.no_grad():
        assert torch.equal(loaded(x), out)
    assert "prune_attention_dims" in {e.op for e in vitprune.get_recipe(loaded).edits}


def test_a_head_whose_value_dims_are_all_closed_costs_nothing():
    """Extraction removes an open head that keeps no value dimension, so the hardened cost (what the budget search
    and the report use) must not count its Q and K either."""
    model = tracked("deit_tiny_patch16_224", {"depth": 2})
    gates = HiAPGates(layer_shapes(model))
    with torch.no_grad():
        gates.dim[0][1] = -1.0  # head 1 of block 0: gate open, every value dimension closed
    fixed = fixed_macs(model)
    small = copy.deepcopy(model)
    kept = extract(small, gates)
    assert kept[0]["heads"] == [0, 2]
    assert hardened_macs(gates, fixed) == count_macs(small).macs
    assert layer_summary(gates)[0]["heads"] == 2


#: Families that gate less: Swin's heads are gated whole (its window attention runs one value width), ConvNeXt has no
#: attention (neurons and FFN blocks only).
STAGED = [("swin_tiny_patch4_window7_224", {**SWIN_TINY, "depths": (2, 2, 2, 2)}),
          ("convnext_tiny", {**CONVNEXT_TINY, "depths": (1, 1, 2, 1)})]


@pytest.mark.parametrize("name, kwargs", STAGED, ids=["swin", "convnext"])
def test_staged_families_extract_exactly_and_count_the_cost_model(name, kwargs):
    """Per block tokens and widths (Swin's windows: each query attends to its window), frozen value gates: the
    extracted model equals the gated one, and its MACs are the exact cost model's, as FlopCounterMode counts them."""
    model = tracked(name, kwargs)
    shapes = layer_shapes(model)
    report = count_macs(model)
    assert [s.tokens for s in shapes] == [b.tokens for b in report.blocks]
    gates = HiAPGates(shapes)
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for p in gates.parameters():
            if p.requires_grad:  # value gates of a family without per-head value widths stay open
                p.copy_(torch.randn(p.shape, generator=gen) + 0.8)
        gates.block[1].fill_(-1.0)
        for layer, shape in enumerate(shapes):
            if shape.heads:
                assert not shape.value_gates and not gates.dim[layer].requires_grad
                gates.head[layer][0] = 1.0  # at least one head stays (Swin runs no attention without heads)
    x = torch.randn(2, *vitprune.get_adapter(model).input_size, generator=torch.Generator().manual_seed(1))
    expected = _gated_output(model, gates, x)
    macro, micro = gate_cost({k: [t.double() for t in v] for k, v in gates.hardened().items()}, shapes, "exact")
    small = copy.deepcopy(model)
    kept = extract(small, gates)
    assert kept[1]["neurons"] == 0
    with torch.no_grad():
        torch.testing.assert_close(small(x), expected, rtol=1e-5, atol=1e-5)
    # What HiAP cannot prune (stem, patch merging, ConvNeXt's depthwise convolutions, head) is the rest of the dense MACs.
    fixed = report.macs - dense_cost(shapes)
    assert count_macs(small).macs == int(macro + micro) + fixed == flop_counter_macs(small, x[:1])
    assert count_macs(small).params < report.params


def test_swin_refuses_a_block_left_without_heads():
    model = tracked(*STAGED[0])
    gates = HiAPGates(layer_shapes(model))
    with torch.no_grad():
        gates.head[3][:] = -1.0
    with pytest.raises(VitpruneError, match="HiAP closed every head of block 3, and timm-swin models cannot run an "
                                            "attention without heads"):
        extract(model, gates)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_extraction_equals_the_gated_model_for_any_gates(examples):
    """Random small ViTs and random gate logits (from nearly all closed to nearly all open): the extracted model
    equals the gated one under the hardened gates, and its MACs plus value padding are what FlopCounterMode sees."""
    @property_test(examples, st.data())
    def check(data):
        model = data.draw(small_vits())
        gates = HiAPGates(layer_shapes(model))
        gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
        with torch.no_grad():
            for p in gates.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) + data.draw(st.floats(-1.5, 2.5)))
        x = images(model)
        expected = _gated_output(model, gates, x)
        extract(model, gates)
        with torch.no_grad():
            torch.testing.assert_close(model(x), expected, rtol=1e-5, atol=1e-5)
        assert count_macs(model, image=x[0]).macs + value_padding_macs(model, image=x[0]) == flop_counter_macs(
            model, x[:1])

    check()
