"""Width surgery is exact: the smaller dense model equals the original with the removed units masked."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import build, tracked
from hypothesis import strategies as st
from strategies import EXAMPLES, images, property_test, small_vits

import vitprune
from vitprune.adapters import HFViTAdapter, TimmViTAdapter
from vitprune.adapters.timm_blocks import DepthBlock
from vitprune.errors import VitpruneError
from vitprune.surgery import (compensate_mean_shift, prune_attention_dims, prune_head_dims, prune_heads,
                              prune_mlp_neurons, prune_tokens, slice_linear)


def _input(model, batch=2):
    torch.manual_seed(3)
    return torch.randn(batch, *vitprune.get_adapter(model).input_size)


@pytest.mark.needs("head_width")
def test_prune_heads_equals_masked_heads(small_model_spec):
    name, kwargs = small_model_spec
    model = tracked(name, kwargs)
    masked = copy.deepcopy(model)
    adapter = vitprune.get_adapter(model)
    heads, hd = adapter.block(2).attn.num_heads, adapter.block(2).attn.head_dim
    keep = [h for h in range(heads) if h != 1]
    with torch.no_grad():  # masking: removed head's columns of proj contribute nothing
        vitprune.get_adapter(masked).block(2).attn.proj.weight[:, hd:2 * hd] = 0
    params_before = sum(p.numel() for p in model.parameters())

    prune_heads(model, 2, keep)

    x = _input(model)
    with torch.no_grad():
        torch.testing.assert_close(model(x), masked(x), rtol=1e-5, atol=1e-5)
    view = vitprune.get_adapter(model).block(2).attn
    assert view.num_heads == heads - 1 and view.qkv.widths == ((heads - 1) * hd,) * 3
    assert sum(lin.out_features for lin in view.qkv.linears) == 3 * (heads - 1) * hd
    dim = view.proj.out_features  # the block's stream (Swin's stages differ)
    qkv_bias = adapter.block(2).attn.qkv.linears[0].bias is not None
    table = getattr(view.module, "relative_position_bias_table", None)  # Swin's: a column per head
    # qkv rows (with their biases), proj columns, the head's relative-position biases
    removed = 3 * hd * (dim + qkv_bias) + hd * dim + (0 if table is None else table.shape[0])
    assert sum(p.numel() for p in model.parameters()) == params_before - removed
    assert vitprune.get_recipe(model).edits[-1].args == {"block": 2, "keep": keep}


def test_prune_mlp_neurons_equals_masked_neurons(small_model_spec):
    name, kwargs = small_model_spec
    model = tracked(name, kwargs)
    masked = copy.deepcopy(model)
    hidden = vitprune.get_adapter(model).block(5).mlp.hidden_features
    keep = list(range(0, hidden, 3))
    removed = sorted(set(range(hidden)) - set(keep))
    with torch.no_grad():
        vitprune.get_adapter(masked).block(5).mlp.fc2.weight[:, removed] = 0

    prune_mlp_neurons(model, block=5, keep=keep)

    x = _input(model)
    with torch.no_grad():
        torch.testing.assert_close(model(x), masked(x), rtol=1e-5, atol=1e-5)
    adapter = vitprune.get_adapter(model)
    assert adapter.block(5).mlp.hidden_features == len(keep)
    width = vitprune.get_adapter(masked).block(5).mlp.fc1.in_features  # the block's stream (stages differ)
    assert adapter.block(5).mlp.fc1.weight.shape == (len(keep), width)


@pytest.mark.needs("value_width")
def test_a_sublayer_left_no_unit_is_a_constant(small_model_spec):
    """An attention without heads and an MLP without neurons give their output bias; timm's block then skips them
    and the norms before them."""
    name, kwargs = small_model_spec
    model = tracked(name, kwargs)
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        for p in model.parameters():  # timm starts biases at 0: the constants must show
            p.add_(0.02 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
        zeroed.load_state_dict(model.state_dict())
        vitprune.get_adapter(zeroed).block(1).attn.proj.weight.zero_()
        vitprune.get_adapter(zeroed).block(2).mlp.fc2.weight.zero_()

    prune_attention_dims(model, 1, [], [])
    prune_mlp_neurons(model, 2, [])

    views = vitprune.get_adapter(model).blocks()
    assert views[1].attn.num_heads == 0 and views[2].mlp.hidden_features == 0
    calls = []
    for block in (1, 2):
        for norm in (views[block].norm1, views[block].norm2):
            norm.register_forward_hook(lambda m, i, o, name=norm: calls.append(name))
    timm_family = isinstance(vitprune.get_adapter(model), TimmViTAdapter)
    x = _input(model)
    with torch.no_grad():
        expected = zeroed(x)
        torch.testing.assert_close(model.eval()(x), expected, rtol=1e-5, atol=1e-5)
        if timm_family:
            assert type(model.blocks[1]) is DepthBlock and type(model.blocks[2]) is DepthBlock
            assert calls == [views[1].norm2, views[2].norm1]  # only the norms of live sublayers ran
        calls.clear()
        # No dropout in these models; a stem's BatchNorm reads the batch in training in both.
        torch.testing.assert_close(model.train()(x), zeroed.train()(x), rtol=1e-5, atol=1e-5)
        assert len(calls) == 4
    # The constant path never writes to the bias.
    assert torch.equal(views[2].mlp.fc2.bias, vitprune.get_adapter(zeroed).block(2).mlp.fc2.bias)


def test_token_pruning_runs_on_a_block_whose_mlp_has_no_neuron():
    model = vitprune.track(build("deit_tiny_patch16_224", {"depth": 3}), "deit_tiny_patch16_224", depth=3)
    prune_mlp_neurons(model, 1, [])
    reference = copy.deepcopy(model).eval()
    prune_tokens(model, 1, 1.0)
    x = _input(model)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x), reference(x), rtol=1e-5, atol=1e-5)


def _attention_path(model, fused: bool) -> None:
    """Make the model's attention take its fused (scaled-dot-product kernel) or unfused (eager) path."""
    adapter = vitprune.get_adapter(model)
    if isinstance(adapter, HFViTAdapter):
        model.hf.set_attn_implementation("sdpa" if fused else "eager")
        return
    for view in adapter.blocks():  # timm's attentions (Swin's starts unfused: timm deems its fused path experimental)
        view.attn.module.fused_attn = fused


@pytest.mark.needs("head_width")
def test_prune_head_dims_keeps_the_same_offsets_in_every_head_and_both_attention_paths_agree(small_model_spec):
    name, kwargs = small_model_spec
    model = tracked(name, kwargs)
    view = vitprune.get_adapter(model).block(0).attn
    heads, hd = view.num_heads, view.head_dim
    same = copy.deepcopy(model)
    prune_head_dims(same, 0, list(range(hd)))
    x = _input(model)
    with torch.no_grad():
        assert torch.equal(same(x), model(x))
    keep = [1, 2, 3, hd // 2, hd - 2, hd - 1]
    q_rows = view.qkv.linears[0].weight[[h * hd + j for h in range(heads) for j in keep]]
    prune_head_dims(model, 0, keep)
    attn = vitprune.get_adapter(model).block(0).attn
    assert (attn.num_heads, attn.head_dim, attn.qkv.widths, attn.proj.in_features) == (heads, 6, (6 * heads,) * 3,
                                                                                        6 * heads)
    assert attn.softmax_scale == 6 ** -0.5
    assert torch.equal(attn.qkv.linears[0].weight[:6 * heads], q_rows)
    with torch.no_grad():
        _attention_path(model, fused=True)
        fused = model(x)
        _attention_path(model, fused=False)
        torch.testing.assert_close(model(x), fused, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("keep, match", [([], "at least one"), ([2, 1], "unique and sorted"), ([0, 99], r"\[0, 3\)")])
def test_bad_indices_are_rejected(keep, match):
    model = vitprune.create_model("deit_tiny_patch16_224")
    with pytest.raises(ValueError, match=match):
        prune_heads(model, 0, keep)
    assert vitprune.get_recipe(model).edits == []


def test_surgery_needs_a_recipe():
    model = build("deit_tiny_patch16_224", {})
    with pytest.raises(VitpruneError, match="no vitprune recipe"):
        prune_mlp_neurons(model, 0, [0])


def test_slice_linear_copies_selected_rows_and_columns():
    linear = torch.nn.Linear(4, 3)
    sliced = slice_linear(linear, out_idx=[0, 2], in_idx=[1, 3])
    torch.testing.assert_close(sliced.weight, linear.weight[[0, 2]][:, [1, 3]], rtol=0, atol=0)
    torch.testing.assert_close(sliced.bias, linear.bias[[0, 2]], rtol=0, atol=0)
    assert sliced.weight.data_ptr() != linear.weight.data_ptr()


@pytest.mark.parametrize("examples", EXAMPLES)
def test_mean_shift_compensation_equals_replacing_the_removed_neurons_by_their_means(examples):
    """Any block, any removed neurons, any means: compensate then prune equals the model whose removed neurons'
    activations are replaced by those means."""
    @property_test(examples, st.data())
    def check(data):
        model = data.draw(small_vits())
        views = vitprune.get_adapter(model).blocks()
        block = data.draw(st.integers(0, len(views) - 1))
        hidden = views[block].mlp.hidden_features
        removed = sorted(data.draw(st.sets(st.integers(0, hidden - 1), max_size=hidden)))
        means = torch.tensor(data.draw(st.lists(st.floats(-3, 3), min_size=hidden, max_size=hidden)))
        reference = copy.deepcopy(model)
        gone = torch.tensor(removed, dtype=torch.long)

        def replace(_module, args):
            h = args[0].clone()
            h[..., gone] = means[gone]
            return (h,)

        vitprune.get_adapter(reference).block(block).mlp.fc2.register_forward_pre_hook(replace)
        compensate_mean_shift(model, block, removed, means)
        prune_mlp_neurons(model, block, [i for i in range(hidden) if i not in removed])
        x = images(model)
        with torch.no_grad():
            torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-5)

    check()
