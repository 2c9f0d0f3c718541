"""``prune_attention_dims``: heads with their own value widths, equal to zeroing the removed outputs."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import build, tracked

import vitprune
from vitprune.surgery import prune_attention_dims, prune_heads


def _model():
    return vitprune.track(build("deit_tiny_patch16_224", {"depth": 2}), "deit_tiny_patch16_224", depth=2)


# Uneven widths (one head whole), and one width below the head's for every head: the two padding paths.
LAYOUTS = {"uneven": {0: [1, 5, 7], 2: None}, "uniform": {0: [1, 5, 7], 1: [0, 2, 4], 2: [3, 8, 9]}}


@pytest.mark.needs("value_width")
@pytest.mark.parametrize("layout", LAYOUTS)
def test_kept_value_dims_equal_zeroed_proj_columns(small_model_spec, layout):
    name, kwargs = small_model_spec
    kwargs = {**kwargs, "depth": 2}
    model = tracked(name, kwargs)
    zeroed = copy.deepcopy(model)
    dim = vitprune.get_adapter(model).block(0).attn.head_dim
    kept = {h: list(range(dim)) if d is None else d for h, d in LAYOUTS[layout].items()}
    prune_attention_dims(model, 0, list(kept), list(kept.values()))
    with torch.no_grad():
        proj = vitprune.get_adapter(zeroed).block(0).attn.proj
        mask = torch.zeros(proj.in_features, dtype=torch.bool)
        mask[[h * dim + j for h, d in kept.items() for j in d]] = True
        proj.weight[:, ~mask] = 0.0
        x = torch.randn(2, *vitprune.get_adapter(model).input_size)
        torch.testing.assert_close(model(x), zeroed(x), rtol=1e-5, atol=1e-5)
    view = vitprune.get_adapter(model).block(0).attn
    widths = tuple(len(d) for d in kept.values())
    assert view.value_dims == widths and view.attn_dim == sum(widths) and view.num_heads == len(kept)
    assert sum(lin.out_features for lin in view.qkv.linears) == 2 * len(kept) * dim + sum(widths)


def test_attention_dims_mistakes():
    model = _model()
    with pytest.raises(ValueError, match="2 value-dimension lists for 1 kept heads"):
        prune_attention_dims(model, 0, [1], [[0], [1]])
    with pytest.raises(ValueError, match="head 1 value dimensions: at least one index must be kept"):
        prune_attention_dims(model, 0, [1], [[]])
    prune_attention_dims(model, 0, [1], [[0, 3]])
    with pytest.raises(ValueError, match="use prune_attention_dims"):
        prune_heads(model, 0, [0])
    with pytest.raises(ValueError, match="needs uniform, ungated attention"):
        prune_attention_dims(model, 0, [0], [[0]])
