"""timm's Swin: the views describe window attention as the model runs it (relative-position bias per head, shifted
windows and their mask), heads prune at any ratio exactly with their bias columns, MACs count as FlopCounterMode
counts at the tiny and the released sizes, and what Swin cannot take is refused in one line. Its exactness tests
are otherwise the shared ones (its row ``swin_tiny`` in tests/conftest.py)."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import SWIN_TINY, tracked
from timm.models.swin_transformer import window_partition

import vitprune
from vitprune.adapters import SwinAdapter
from vitprune.adapters.timm_swin import SwinDepthBlock
from vitprune.errors import UnsupportedArchitectureError
from vitprune.measure import count_macs, flop_counter_macs
from vitprune.surgery import (
    prune_attention_dims,
    prune_depth,
    prune_embed_dims,
    prune_head_dims,
    prune_heads,
    prune_mlp_neurons,
    prune_tokens,
)

NAME = "swin_tiny_patch4_window7_224"


def _model():
    return tracked(NAME, SWIN_TINY)


def _input(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(3))


def test_views_describe_the_stages():
    """Twelve blocks in four stages of doubling width; heads, MLP widths, windows and shifts as configured."""
    model = _model()
    adapter = vitprune.get_adapter(model)
    assert type(adapter) is SwinAdapter and adapter.input_size == (3, 32, 32) and adapter.num_prefix_tokens == 0
    views = adapter.blocks()
    widths = [16] * 2 + [32] * 2 + [64] * 6 + [128] * 2
    heads = [2] * 2 + [4] * 8 + [8] * 2
    assert [v.name for v in views[:3]] == ["layers.0.blocks.0", "layers.0.blocks.1", "layers.1.blocks.0"]
    assert [v.attn.proj.out_features for v in views] == widths
    assert [v.attn.num_heads for v in views] == heads
    assert [v.attn.head_dim for v in views] == [w // h for w, h in zip(widths, heads)]
    assert [v.mlp.hidden_features for v in views] == [4 * w for w in widths]
    assert all(v.module is model.get_submodule(v.name) for v in views)
    # Stages 1 and 2 shift every other block's windows; stage 3's 4x4 map is one window, stage 4's 2x2 shrinks it.
    assert [v.module.shift_size for v in views] == [(0, 0), (2, 2)] * 2 + [(0, 0)] * 8
    assert adapter.num_features == 128 == adapter.classifier_heads()[0].in_features


def _window_attention(view, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Window attention recomputed from the view: ``softmax(q·kᵀ·scale + bias[head] + mask)·v``, then ``proj``."""
    a, module = view.attn, view.attn.module
    b, n, _ = x.shape
    q, k, v = (t.reshape(b, n, a.num_heads, a.head_dim).transpose(1, 2) for t in a.qkv(x))
    table = module.relative_position_bias_table  # ((2W-1)^2, heads): one column per head
    bias = table[module.relative_position_index.view(-1)].view(n, n, a.num_heads).permute(2, 0, 1)
    scores = (q * a.softmax_scale) @ k.transpose(-2, -1) + bias
    if mask is not None:
        windows = mask.shape[0]
        scores = (scores.view(-1, windows, a.num_heads, n, n) + mask[None, :, None]).view(b, a.num_heads, n, n)
    return a.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, a.attn_dim))


@pytest.mark.parametrize("fused", [False, True], ids=["eager", "sdpa"])
def test_view_reproduces_window_attention(fused):
    """The head layout of qkv and the bias columns the view documents are the ones the model runs, shifted or not."""
    model = _model()
    adapter = vitprune.get_adapter(model)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for view in adapter.blocks():
            view.attn.module.fused_attn = fused
            window = view.module.window_size
            c = view.attn.proj.out_features
            res = view.module.input_resolution
            x = window_partition(torch.randn(2, *res, c, generator=gen), window).reshape(-1, window[0] * window[1], c)
            mask = view.module.attn_mask
            torch.testing.assert_close(view.attn.module(x, mask=mask), _window_attention(view, x, mask),
                                       rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.75])
def test_heads_pruned_at_any_ratio_equal_the_masked_heads(ratio, tmp_path):
    """Every block loses ``ratio`` of its heads (chosen at random; at least one stays): the model equals the
    original with those heads' outputs masked, so each kept head kept its own relative-position bias column."""
    model = _model()
    masked = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(int(ratio * 100))
    kept = {}
    for view in vitprune.get_adapter(model).blocks():
        heads, hd = view.attn.num_heads, view.attn.head_dim
        keep = sorted(torch.randperm(heads, generator=gen)[:max(1, round(heads * (1 - ratio)))].tolist())
        kept[view.index] = keep
        with torch.no_grad():
            proj = vitprune.get_adapter(masked).block(view.index).attn.proj
            for h in set(range(heads)) - set(keep):
                proj.weight[:, h * hd:(h + 1) * hd] = 0
        table = view.attn.module.relative_position_bias_table.detach().clone()
        prune_heads(model, view.index, keep)
        new = vitprune.get_adapter(model).block(view.index).attn
        assert new.num_heads == len(keep)
        assert torch.equal(new.module.relative_position_bias_table, table[:, keep])
    x = _input()
    with torch.no_grad():
        torch.testing.assert_close(model(x), masked(x), rtol=1e-5, atol=1e-5)
    vitprune.save(model, tmp_path / "swin")
    loaded = vitprune.load(tmp_path / "swin")
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
    assert [v.attn.num_heads for v in vitprune.get_adapter(loaded).blocks()] == [len(k) for k in kept.values()]


def test_pruned_counts_equal_flop_counter_mode():
    """Heads, head dimensions, neurons, removed attentions (shifted or not) and merged MLPs: MACs in the full
    convention equal FlopCounterMode's, on both attention paths, and params equal the parameters' numel."""
    model = _model()
    prune_heads(model, 1, [1])
    prune_head_dims(model, 4, [0, 2, 3, 5, 7])
    prune_mlp_neurons(model, 6, list(range(0, 256, 3)))
    prune_mlp_neurons(model, 11, [])
    prune_depth(model, attention=[3, 10], activation=[0, 3, 8])
    report = count_macs(model)
    assert report.params == sum(p.numel() for p in model.parameters())
    assert [b.tokens for b in report.blocks] == [256] * 2 + [64] * 2 + [16] * 6 + [4] * 2
    assert report.blocks[3].attn_matmul == report.blocks[10].attn_matmul == 0
    # Window attention: block 1 keeps one head of 8 dims over 16 windows of 16 tokens, so QK^T and A.V cost
    # 16 windows * 16^2 * 2 * 8.
    assert report.blocks[1].attn_matmul == 16 * 16 ** 2 * 2 * 8
    for fused in (False, True):
        for view in vitprune.get_adapter(model).blocks():
            if view.attn is not None:
                view.attn.module.fused_attn = fused
        assert flop_counter_macs(model, _input(1)) == report.totals()["macs_full"]


@pytest.mark.slow
@pytest.mark.parametrize("name, params, macs", [
    ("swin_tiny_patch4_window7_224", 28_288_354, 4_490_566_656),
    ("swin_small_patch4_window7_224", 49_606_258, 8_740_875_264),
    ("swin_base_patch4_window7_224", 87_768_224, 15_430_946_816),
])
def test_released_sizes_count_as_flop_counter_mode(name, params, macs):
    """VBP's Table 1 prints 28.29 / 49.61 / 87.77 M params (ours to the last unit) and 4.50 / 8.76 / 15.46 GMACs,
    0.2% above ours: Swin's own counter adds the norms (benchmarks/results/paper_tables.md)."""
    model = vitprune.create_model(name)
    report = count_macs(model)
    assert (report.params, report.totals()["macs_full"]) == (params, macs)
    assert report.params == sum(p.numel() for p in model.parameters())
    assert flop_counter_macs(model, torch.randn(1, 3, 224, 224)) == macs


def test_depth_surgery_keeps_timm_state_dict_keys():
    """A block without attention keeps the names of what is left (a timm checkpoint's keys still load into it)."""
    model = _model()
    before = {k for k in model.state_dict() if k.startswith("layers.0.blocks.1.")}
    prune_depth(model, attention=[1])
    block = model.get_submodule("layers.0.blocks.1")
    assert isinstance(block, SwinDepthBlock)
    after = set(model.state_dict())
    assert {k for k in before if ".attn." not in k} == {k for k in after if k.startswith("layers.0.blocks.1.")}


@pytest.mark.parametrize("edit, message", [
    (lambda m: prune_tokens(m, 0, 0.5), r"token reduction needs to prune or merge tokens, which vitprune cannot do "
                                        r"on timm-swin models: Swin's windows and patch merging need the whole token "
                                        r"grid"),
    (lambda m: prune_embed_dims(m, [0]), "embedding pruning needs to prune embedding channels, which vitprune cannot "
                                         "do on timm-swin models"),
    (lambda m: prune_attention_dims(m, 0, [0], [[0]]), "value-width pruning needs to give each head its own number "
                                                       "of value dimensions, which vitprune cannot do on timm-swin"),
], ids=["tokens", "embedding", "value-dims"])
def test_edits_a_swin_cannot_take_are_refused(edit, message):
    model = _model()
    with pytest.raises(UnsupportedArchitectureError, match=message):
        edit(model)
    assert vitprune.get_recipe(model).edits == []


def test_star_is_refused_for_lack_of_a_class_token():
    adapter = vitprune.get_adapter(_model())
    with pytest.raises(UnsupportedArchitectureError, match=r"STAR needs to prune or merge tokens .* timm-swin models: "
                                                           r".*Swin has no \[CLS\] token"):
        adapter.require("token_reduction", "lrp", by="STAR")
