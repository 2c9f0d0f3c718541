"""``prune_embed_dims``: the residual stream loses channels everywhere at once, and the counts stay right."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import tracked

import vitprune
from vitprune.measure import count_macs, flop_counter_macs, value_padding_macs
from vitprune.surgery import (prune_attention_dims, prune_depth, prune_embed_dims, prune_heads, prune_mlp_neurons,
                              prune_tokens)


def _model(name, kwargs):
    kwargs = {**kwargs, "depth": 4}
    return tracked(name, kwargs)


def _input(model):
    return torch.randn(2, *vitprune.get_adapter(model).input_size, generator=torch.Generator().manual_seed(0))


def _flop_macs(model) -> int:
    return flop_counter_macs(model.eval(), torch.randn(1, *vitprune.get_adapter(model).input_size))


@pytest.mark.needs("embed_width")
def test_keeping_every_channel_changes_nothing(small_model_spec):
    model = _model(*small_model_spec)
    before = copy.deepcopy(model).eval()
    prune_embed_dims(model, list(range(vitprune.get_adapter(model).embed_dim)))
    x = _input(model)
    with torch.no_grad():
        assert torch.equal(model.eval()(x), before(x))


def _every_block_form(model):
    """Blocks that depth and width surgery left in every form the family can take: no attention, a merged MLP,
    uneven heads, fewer heads, fewer neurons, and a sublayer without units."""
    adapter = vitprune.get_adapter(model)
    hd, heads = adapter.block(0).attn.head_dim, adapter.block(0).attn.num_heads
    prune_depth(model, attention=[0], activation=[1], fold_norm=True)
    if "value_width" in adapter.capabilities:
        prune_attention_dims(model, 1, [0, heads - 1], [list(range(hd // 2)), list(range(hd))])
    prune_heads(model, 2, [0])
    prune_mlp_neurons(model, 2, list(range(0, adapter.block(2).mlp.hidden_features, 3)))
    prune_mlp_neurons(model, 3, [])


@pytest.mark.needs("embed_width")
def test_pruned_stream_runs_counts_right_and_round_trips(small_model_spec, tmp_path):
    model = _model(*small_model_spec)
    _every_block_form(model)
    dim = vitprune.get_adapter(model).embed_dim
    keep = list(range(1, dim, 2))[: dim // 2 - 8]
    macs_before = count_macs(model)

    prune_embed_dims(model, keep)

    adapter = vitprune.get_adapter(model)
    assert adapter.embed_dim == len(keep)
    widths = {m.normalized_shape[0] for m in model.modules() if isinstance(m, torch.nn.LayerNorm)}
    for view in adapter.blocks():
        if view.attn is not None:
            widths |= {view.attn.qkv.in_features, view.attn.proj.out_features}
        widths |= {view.mlp.fc1.in_features, (view.mlp.fc2 or view.mlp.fc1).out_features}
    assert widths == {len(keep)}
    x = _input(model)
    with torch.no_grad():
        out = model.eval()(x)
    assert out.shape == (2, adapter.num_classes or len(keep)) and torch.isfinite(out).all()
    report = count_macs(model)
    # The stream runs through the blocks (a convolutional stem before it keeps its width).
    assert sum(b.total() for b in report.blocks) < sum(b.total() for b in macs_before.blocks) / 1.8
    assert report.macs + value_padding_macs(model) == _flop_macs(model)
    assert report.params == sum(p.numel() for p in model.parameters())
    vitprune.save(model, tmp_path / "m")
    loaded = vitprune.load(tmp_path / "m")
    with torch.no_grad():
        assert torch.equal(loaded.eval()(x), out)


def test_sliced_stream_reads_the_kept_channels():
    # The stem is linear up to the first norm: the kept channels of the embedded tokens are the original's.
    model = _model("deit_tiny_patch16_224", {})
    keep = [0, 5, 6, 100, 191]
    x = _input(model)
    with torch.no_grad():
        full = model._pos_embed(model.patch_embed(x))
        pruned = copy.deepcopy(model)
        prune_embed_dims(pruned, keep)
        torch.testing.assert_close(pruned._pos_embed(pruned.patch_embed(x)), full[..., keep])


def test_token_pruned_model_loses_channels_too():
    model = _model("deit_tiny_patch16_224", {})
    prune_tokens(model, 1, 0.5)
    prune_embed_dims(model, list(range(96)))
    assert count_macs(model).macs == _flop_macs(model)


def test_embed_dims_mistakes():
    model = _model("deit_tiny_patch16_224", {})
    with pytest.raises(ValueError, match="embedding channels: kept indices must lie in"):
        prune_embed_dims(model, [0, 192])
    with pytest.raises(ValueError, match="embedding channels: at least one index"):
        prune_embed_dims(model, [])
