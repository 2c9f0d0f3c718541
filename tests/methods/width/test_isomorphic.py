"""Width pruning chosen by torch-pruning and cut by vitprune's recorded edits."""

from __future__ import annotations

import copy
import sys

import pytest
import torch
from conftest import SWIN_TINY, build, tracked

import vitprune
from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.measure import count_macs, flop_counter_macs
from vitprune.methods.width import apply_width, plan_width, prune_width, prune_width_to_macs
from vitprune.surgery import prune_attention_dims, prune_depth, prune_tokens

tp = pytest.importorskip("torch_pruning")


def _model(name="deit_tiny_patch16_224", depth=3, **kwargs):
    return vitprune.track(build(name, {"depth": depth, **kwargs}), name, depth=depth, **kwargs)


def _input(model, batch=2):
    return torch.randn(batch, *vitprune.get_adapter(model).input_size, generator=torch.Generator().manual_seed(0))


def _torch_pruning_itself(model, ratio):
    """torch-pruning's own pruned model, set up as its timm ViT example does."""
    model = copy.deepcopy(model)
    pruner = tp.pruner.MetaPruner(
        model, _input(model, 1), importance=tp.importance.GroupMagnitudeImportance(p=1), global_pruning=True,
        isomorphic=True, pruning_ratio=ratio, ignored_layers=[model.head],
        num_heads={b.attn.qkv: b.attn.num_heads for b in model.blocks}, prune_head_dims=True,
        unwrapped_parameters=[(model.cls_token, 2), (model.pos_embed, 2)])
    pruner.step()
    for block in model.blocks:
        attn = block.attn
        attn.num_heads = pruner.num_heads[attn.qkv]
        attn.head_dim = attn.qkv.out_features // (3 * attn.num_heads)
        attn.attn_dim = attn.num_heads * attn.head_dim
    return model


def test_recorded_edits_equal_torch_pruning_own_result(tmp_path):
    model = _model()
    theirs = _torch_pruning_itself(model, 0.5)
    plan = prune_width(model, 0.5)
    assert len(plan.embed) == 96 and set(plan.head_dims) == set(plan.neurons) == {0, 1, 2}
    x = _input(model)
    with torch.no_grad():
        torch.testing.assert_close(model(x), theirs(x), rtol=0, atol=0)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in theirs.parameters())
    vitprune.save(model, tmp_path / "m")
    with torch.no_grad():
        assert torch.equal(vitprune.load(tmp_path / "m")(x), model(x))


@pytest.mark.parametrize("heads", [True, False], ids=["heads", "head-dims"])
@pytest.mark.parametrize("ratio", [0.25, 0.6])
def test_swin_width_below_and_above_half(tmp_path, heads, ratio):
    """Swin: torch-pruning plans heads (or head dims) and neurons with the stages' streams left whole (its stem and
    patch merging are not pruned; the bias tables are hidden from it); vitprune cuts each head with its bias column.
    Whole heads and neurons equal the model with them masked; counts equal FlopCounterMode; the save loads."""
    model = tracked("swin_tiny_patch4_window7_224", SWIN_TINY)
    masked = copy.deepcopy(model)
    plan = prune_width(model, ratio, heads=heads, embed=False)
    assert plan.embed is None and plan.neurons and (plan.heads if heads else plan.head_dims)
    views = vitprune.get_adapter(model).blocks()
    assert all(v.attn.num_heads >= 1 and v.attn.module.relative_position_bias_table.shape[1] == v.attn.num_heads
               for v in views)
    x = _input(model)
    if heads:
        with torch.no_grad():
            for view in vitprune.get_adapter(masked).blocks():
                hd = view.attn.head_dim
                for h in set(range(view.attn.num_heads)) - set(plan.heads.get(view.index, range(view.attn.num_heads))):
                    view.attn.proj.weight[:, h * hd:(h + 1) * hd] = 0
                kept = plan.neurons.get(view.index, range(view.mlp.hidden_features))
                view.mlp.fc2.weight[:, sorted(set(range(view.mlp.hidden_features)) - set(kept))] = 0
            torch.testing.assert_close(model(x), masked(x), rtol=1e-5, atol=1e-5)
    report = count_macs(model)
    assert report.macs == flop_counter_macs(model, x[:1]) < count_macs(masked).macs
    vitprune.save(model, tmp_path / "m")
    with torch.no_grad():
        assert torch.equal(vitprune.load(tmp_path / "m")(x), model(x))


def test_swin_stream_widths_are_refused():
    model = tracked("swin_tiny_patch4_window7_224", SWIN_TINY)
    with pytest.raises(UnsupportedArchitectureError, match="width pruning needs to prune embedding channels, which "
                                                           "vitprune cannot do on timm-swin models"):
        plan_width(model, 0.3)


def test_width_pruning_a_depth_pruned_deit_s_counts_right(tmp_path):
    model = _model("deit_small_patch16_224", depth=4)
    prune_depth(model, attention=[1], activation=[0, 2], fold_norm=True)
    prune_width(model, 0.3)
    adapter = vitprune.get_adapter(model)
    assert adapter.embed_dim < 384 and adapter.block(0).mlp.merged and adapter.block(1).attn is None
    x = _input(model)
    with torch.no_grad():
        out = model(x)
    assert torch.isfinite(out).all()
    assert count_macs(model).macs == flop_counter_macs(model, _input(model, 1))
    vitprune.save(model, tmp_path / "m")
    loaded = vitprune.load(tmp_path / "m")
    with torch.no_grad():
        assert torch.equal(loaded(x), out)
    # The recipe alone rebuilds the architecture on a fresh base model.
    assert [tuple(p.shape) for p in loaded.parameters()] == [tuple(p.shape) for p in model.parameters()]


def test_whole_heads_and_a_whole_stream():
    model = _model("deit_small_patch16_224", depth=2)
    plan = plan_width(model, 0.5, heads=True, embed=False)
    assert plan.embed is None and not plan.head_dims and {len(k) for k in plan.heads.values()} <= {2, 3, 4}
    apply_width(model, plan)
    assert vitprune.get_adapter(model).embed_dim == 384
    assert [vitprune.get_adapter(model).block(b).attn.num_heads for b in (0, 1)] == [len(plan.heads[0]),
                                                                                      len(plan.heads[1])]


def test_taylor_importance_uses_the_batches():
    model = _model()
    images, labels = _input(model, 4), torch.tensor([0, 1, 2, 3])
    taylor = plan_width(model, 0.5, importance="taylor", batches=[(images, labels)])
    assert taylor.neurons != plan_width(model, 0.5).neurons
    with pytest.raises(VitpruneError, match="taylor importance needs at least one batch"):
        plan_width(model, 0.5, importance="taylor")


def test_a_mac_target_is_met_from_below():
    model = _model()
    dense = count_macs(model, convention="linear").macs
    ratio, plan = prune_width_to_macs(model, 0.5 * dense, convention="linear", steps=8)
    reached = count_macs(model, convention="linear").macs
    assert 0.45 * dense < reached <= 0.5 * dense and 0 < ratio < 0.95
    assert vitprune.get_recipe(model).edits[-1].op == "prune_embed_dims" and plan.embed is not None
    with pytest.raises(VitpruneError, match="is not below the model's"):
        prune_width_to_macs(model, reached, convention="linear")
    with pytest.raises(VitpruneError, match="is out of reach: width ratio 0.95 still costs"):
        prune_width_to_macs(model, 1000)


def _widths(model):
    """The stream width, and per block the FFN width, the attention width and the head width."""
    adapter = vitprune.get_adapter(model)
    return [adapter.embed_dim] + [w for v in adapter.blocks() for w in (
        v.mlp.hidden_features, v.attn.num_heads * v.attn.head_dim, v.attn.head_dim)]


@pytest.mark.parametrize("heads", [False, True])
def test_round_to_keeps_every_width_a_multiple(heads):
    """deit_small (384 wide, 6 heads of 64, 1536 neurons) at ratio 0.2: unrounded, widths such as 307 or 50 remain."""
    model = _model("deit_small_patch16_224", depth=3)
    reference = copy.deepcopy(model)
    prune_width(reference, 0.2, heads=heads)
    prune_width(model, 0.2, heads=heads, round_to=8)
    assert all(w % 8 == 0 for w in _widths(model)), _widths(model)
    assert any(w % 8 for w in _widths(reference)), _widths(reference)
    x = _input(model)
    with torch.no_grad():
        assert model(x).shape == (2, 1000)


def test_width_mistakes(monkeypatch):
    model = _model()
    with pytest.raises(VitpruneError, match="width ratio must be in"):
        plan_width(model, 1.0)
    with pytest.raises(VitpruneError, match="unknown importance 'l2'"):
        plan_width(model, 0.5, importance="l2")
    uneven = copy.deepcopy(model)
    prune_attention_dims(uneven, 1, [0], [[0, 1]])
    with pytest.raises(UnsupportedArchitectureError, match="blocks.1.attn has uneven or gated heads"):
        plan_width(uneven, 0.5)
    tokens = copy.deepcopy(model)
    prune_tokens(tokens, 1, 0.5)
    with pytest.raises(UnsupportedArchitectureError, match="prune width before tokens"):
        plan_width(tokens, 0.5)
    monkeypatch.setitem(sys.modules, "torch_pruning", None)
    with pytest.raises(VitpruneError, match=r"pip install 'vitprune\[width\]'"):
        plan_width(model, 0.5)
