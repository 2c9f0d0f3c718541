"""HiAP's gated forward: every gate family equals the exact edit (or zeroed weights) it stands for."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import tracked

import vitprune
from vitprune.errors import VitpruneError
from vitprune.methods.hiap import HiAPGates, layer_shapes
from vitprune.methods.hiap.gated import GatedForward
from vitprune.surgery import prune_heads, prune_mlp_neurons


def _model(name="deit_tiny_patch16_224", kwargs=None):
    kwargs = kwargs or {"depth": 3}
    return tracked(name, kwargs)


def _ones(shapes):
    return {k: [torch.ones_like(t) for t in v] for k, v in HiAPGates(shapes).probabilities().items()}


def _run(model, values, x):
    gated = GatedForward(model)
    gated.set(values)
    with torch.no_grad():
        out = model(x)
    gated.remove()
    return out


@pytest.mark.parametrize("name, kwargs", [("deit_tiny_patch16_224", {"depth": 3}),
                                          ("vit_small_patch14_dinov2", {"depth": 2, "img_size": 56})])
def test_each_gate_family_equals_its_edit(name, kwargs):
    model = _model(name, kwargs)
    x = torch.randn(2, *vitprune.get_adapter(model).input_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        dense = model(x)
    torch.testing.assert_close(_run(model, _ones(layer_shapes(model)), x), dense, rtol=0, atol=0)

    heads = _ones(layer_shapes(model))
    heads["head"][1][0] = 0.0
    pruned = copy.deepcopy(model)
    prune_heads(pruned, 1, list(range(1, model.blocks[1].attn.num_heads)))
    with torch.no_grad():
        torch.testing.assert_close(_run(model, heads, x), pruned(x), rtol=1e-5, atol=1e-5)

    neurons = _ones(layer_shapes(model))
    keep = list(range(0, neurons["neuron"][0].numel(), 3))
    neurons["neuron"][0].zero_()[keep] = 1.0
    pruned = copy.deepcopy(model)
    prune_mlp_neurons(pruned, 0, keep)
    with torch.no_grad():
        torch.testing.assert_close(_run(model, neurons, x), pruned(x), rtol=1e-5, atol=1e-5)

    # Value dimensions (and a fully closed layer) equal zeroed input columns of proj; b_O stays (Eq. 1).
    dims = _ones(layer_shapes(model))
    dims["dim"][0][0, ::2] = 0.0
    dims["head"][1].zero_()
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        hd = zeroed.blocks[0].attn.head_dim
        zeroed.blocks[0].attn.proj.weight[:, 0:hd:2] = 0.0
        zeroed.blocks[1].attn.proj.weight.zero_()
        torch.testing.assert_close(_run(model, dims, x), zeroed(x), rtol=1e-5, atol=1e-5)

    # A closed FFN block removes the whole FFN output, fc2's bias included (Eq. 2).
    block = _ones(layer_shapes(model))
    block["block"][0] = torch.tensor(0.0)
    removed = copy.deepcopy(model)
    prune_mlp_neurons(removed, 0, [])
    with torch.no_grad():
        removed.blocks[0].mlp.fc2.bias.zero_()
        torch.testing.assert_close(_run(model, block, x), removed(x), rtol=1e-5, atol=1e-5)
        assert torch.equal(model(x), dense)  # the hooks are gone


def test_gate_value_mistakes():
    model = _model()
    gated = GatedForward(model)
    with pytest.raises(VitpruneError, match="set the gate values"):
        model(torch.randn(1, 3, 224, 224))
    values = _ones(gated.shapes)  # layer_shapes runs the model, which is gated now
    values["dim"][2] = torch.ones(3, 5)
    with pytest.raises(VitpruneError, match=r"block 2: dim gates of shape \(3, 5\), expected \(3, 64\)"):
        gated.set(values)
    with pytest.raises(VitpruneError, match="lack the families"):
        gated.set({"head": values["head"]})
    gated.remove()
