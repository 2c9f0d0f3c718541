"""The gated form: masks switch layers to their identity, importance gets the mask's gradient (STE)."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import tracked

import vitprune
from vitprune.errors import VitpruneError
from vitprune.layers import Gate, GatedLayer
from vitprune.surgery import add_depth_gates, prune_depth, remove_depth_gates


def _model(name="deit_tiny_patch16_224", kwargs=None):
    kwargs = kwargs or {}
    return tracked(name, kwargs)


def _input(model, batch=2):
    torch.manual_seed(3)
    return torch.randn(batch, *vitprune.get_adapter(model).input_size)


def test_gate_is_straight_through():
    gate = Gate(importance=0.7)
    value = gate()
    assert value.item() == 1.0
    (3.0 * value).backward()
    assert gate.importance.grad.item() == 3.0  # dloss/dmask handed on unchanged
    gate.set(False)
    assert gate().item() == 0.0 and not gate.kept


@pytest.mark.parametrize("identity", ["norm", "skip"])
def test_importance_gradient_is_the_mask_gradient(identity):
    """d loss / d importance = sum over tokens and channels of delta * (f(u) - identity(u)) (note 1.2)."""
    model = _model()
    gates = add_depth_gates(model, identity=identity)
    gates.set_masks([4], [])  # one masked-out layer: its gradient must still flow
    recorded = {}

    def capture(key):
        def hook(module, args, output):
            inner = module.inner(args[0])
            rest = args[0] if module._identity is None else module._identity(args[0])
            output.register_hook(lambda grad: recorded.__setitem__(key, (grad * (inner - rest)).sum()))
        return hook

    for kind, block in (("attention", 4), ("attention", 6), ("activation", 2)):
        owner = model.blocks[block].attn if kind == "attention" else model.blocks[block].mlp.act
        owner.register_forward_hook(capture((kind, block)))
    out = model(_input(model))
    out.square().mean().backward()
    for (kind, block), expected in recorded.items():
        got = getattr(gates, kind)[block].importance.grad
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-7)
        assert got.abs().item() > 0


@pytest.mark.needs("attention_removal", "gates")
def test_gates_are_parameters_of_the_model_and_removable(small_model_spec):
    name, kwargs = small_model_spec
    model = _model(name, kwargs)
    x = _input(model)
    with torch.no_grad():
        dense = model(x)
    keys = set(model.state_dict())
    gates = add_depth_gates(model)
    assert len(gates.attention) == len(gates.activation) == 12
    params = {id(p) for p in model.parameters()}
    assert all(id(p) in params for p in gates.parameters())  # an optimiser over model.parameters() trains them
    gates.set_masks([0, 1], [11])
    assert gates.removed() == ([0, 1], [11])
    assert gates.importance()["attention"][0] == 0.0
    remove_depth_gates(model)
    assert set(model.state_dict()) == keys
    assert not any(isinstance(m, (Gate, GatedLayer)) for m in model.modules())
    with torch.no_grad():
        assert torch.equal(model(x), dense)  # unwrapping keeps every layer whatever its mask


def test_gates_skip_layers_already_removed():
    model = _model()
    prune_depth(model, [3], [5])
    gates = add_depth_gates(model)
    assert 3 not in gates.attention and 5 not in gates.activation and len(gates.attention) == 11
    with pytest.raises(VitpruneError, match="block 3 has no gated attention layer"):
        gates.set_masks([3], [])
    with pytest.raises(VitpruneError, match="blocks.0 is gated already"):
        add_depth_gates(model)


def test_gated_model_follows_device_and_copy():
    model = _model()
    gates = add_depth_gates(model, output_gelu=True)
    gates.set_masks([2], [2])
    twin = copy.deepcopy(model).to(torch.float64)
    x = _input(model)
    with torch.no_grad():
        torch.testing.assert_close(twin(x.double()).float(), model(x), rtol=1e-4, atol=1e-4)
    twin_gate = twin.blocks[2].attn.gate
    assert twin_gate.mask.dtype == torch.float64 and twin_gate is not gates.attention[2]
    # The copy's output activation reads the copy's gates, not the original's.
    gates.set_masks([], [])
    with torch.no_grad():
        assert not torch.allclose(twin(x.double()).float(), model(x), atol=1e-3)


def test_unknown_identity_is_rejected():
    with pytest.raises(VitpruneError, match="unknown attention identity 'none'"):
        add_depth_gates(_model(), identity="none")
