"""Width pruning chosen by torch-pruning and cut by vitprune's recorded edits."""

from __future__ import annotations

import copy
import inspect
import sys

import pytest
import torch
from conftest import SWIN_TINY, build, tracked

import vitprune
from vitprune.errors import UnreachableTargetError, UnsupportedArchitectureError, VitpruneError
from vitprune.measure import MacTarget, count_macs, flop_counter_macs, format_count
from vitprune.methods.width import WidthConfig, apply_width, plan_width, prune_width, prune_width_to_macs
from vitprune.methods.width.isomorphic import NoHeadLeftError
from vitprune.surgery import prune_attention_dims, prune_depth, prune_tokens

tp = pytest.importorskip("torch_pruning")


def _model(name="deit_tiny_patch16_224", depth=3, **kwargs):
    return vitprune.track(build(name, {"depth": depth, **kwargs}), name, depth=depth, **kwargs)


def _input(model, batch=2):
    return torch.randn(batch, *vitprune.get_adapter(model).input_size, generator=torch.Generator().manual_seed(0))


#: Attention as head dimensions only (torch-pruning's timm ViT example), and as Isomorphic Pruning's DeiT scripts
#: prune it (heads at the ratio, head dimensions at half of it).
HEAD_DIMS = {"heads": 0.0, "head_dims": 1.0}
JOINT = {"heads": 1.0, "head_dims": 0.5}


def _torch_pruning_itself(model, ratio, heads=0.0, head_dims=1.0):
    """torch-pruning's own pruned model, set up as its timm ViT example does (``head_dims=1``) or as Isomorphic
    Pruning's ``prune.py`` does (head ratio ``heads * ratio``, head-dimension ratio ``head_dims * ratio``)."""
    model = copy.deepcopy(model)
    qkv = tuple(b.attn.qkv for b in model.blocks)
    pruner = tp.pruner.MetaPruner(
        model, _input(model, 1), importance=tp.importance.GroupMagnitudeImportance(p=1), global_pruning=True,
        isomorphic=True, pruning_ratio=ratio, ignored_layers=[model.head],
        num_heads={q: b.attn.num_heads for q, b in zip(qkv, model.blocks)}, prune_head_dims=True,
        prune_num_heads=heads > 0, head_pruning_ratio=heads * ratio,
        pruning_ratio_dict={qkv: head_dims * ratio} if head_dims < 1 else None,
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
    plan = prune_width(model, 0.5, **HEAD_DIMS)
    assert len(plan.embed) == 96 and set(plan.head_dims) == set(plan.neurons) == {0, 1, 2} and not plan.heads
    x = _input(model)
    with torch.no_grad():
        torch.testing.assert_close(model(x), theirs(x), rtol=0, atol=0)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in theirs.parameters())
    vitprune.save(model, tmp_path / "m")
    with torch.no_grad():
        assert torch.equal(vitprune.load(tmp_path / "m")(x), model(x))


def test_heads_and_head_dims_are_pruned_together_as_isomorphic_pruning_does(tmp_path):
    """The defaults remove whole heads (ranked across blocks, at the ratio) and, in the heads left, the same head
    dimensions (at half the ratio), in one plan: the model equals torch-pruning's own, set up as Isomorphic
    Pruning's DeiT scripts set it up. deit_small, 3 blocks of 6 heads of 64: 18 - int(18 * 0.5) = 9 heads go."""
    model = _model("deit_small_patch16_224", depth=3)
    theirs = _torch_pruning_itself(model, 0.5, **JOINT)
    assert WidthConfig(ratio=0.5).plan_options() | JOINT == WidthConfig(ratio=0.5).plan_options()
    plan = prune_width(model, 0.5)
    assert sum(len(k) for k in plan.heads.values()) == 9 and plan.head_dims
    assert any(len(plan.heads.get(b, range(6))) < 6 and b in plan.head_dims for b in range(3))
    views = vitprune.get_adapter(model).blocks()
    assert [(v.attn.num_heads, v.attn.head_dim) for v in views] == [
        (len(plan.heads.get(b, range(6))), len(plan.head_dims.get(b, range(64)))) for b in range(3)]
    x = _input(model)
    with torch.no_grad():
        torch.testing.assert_close(model(x), theirs(x), rtol=0, atol=0)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in theirs.parameters())
    assert count_macs(model).macs == flop_counter_macs(model, x[:1])
    vitprune.save(model, tmp_path / "m")
    with torch.no_grad():
        assert torch.equal(vitprune.load(tmp_path / "m")(x), model(x))


def test_plan_width_defaults_are_the_width_config_defaults():
    defaults = {k: p.default for k, p in inspect.signature(plan_width).parameters.items()
                if p.default is not inspect.Parameter.empty}
    assert {k: defaults[k] for k in WidthConfig(ratio=0.5).plan_options()} == WidthConfig(ratio=0.5).plan_options()


@pytest.mark.slow
def test_a_ratio_that_empties_a_block_of_heads_is_refused_and_the_bisection_stays_below_it():
    """deit_tiny, 3 blocks of 3 heads: at ratio 0.9 with heads=1, 9 - int(9 * 0.1) = 9 heads would go (torch-pruning
    would then silently leave those blocks whole). A MAC target bisects to a ratio that leaves every block a head."""
    model = _model()
    with pytest.raises(NoHeadLeftError, match=r"width ratio 0.9 with heads=1.0 removes every head of blocks.0, "
                                              r"blocks.1, blocks.2; lower the ratio or heads"):
        plan_width(model, 0.9)
    dense = count_macs(model, convention="linear").macs
    prune_width_to_macs(model, MacTarget.relative(0.3, convention="linear"), steps=4)
    assert count_macs(model, convention="linear").macs <= 0.3 * dense
    assert all(v.attn.num_heads >= 1 for v in vitprune.get_adapter(model).blocks())
    with pytest.raises(UnreachableTargetError, match="every width ratio that reaches it removes every head of some "
                                                     "block"):
        prune_width_to_macs(_model(), MacTarget.relative(0.02, convention="linear"), steps=4)


@pytest.mark.parametrize("attention", [{"heads": 1.0, "head_dims": 0.0}, HEAD_DIMS, JOINT],
                         ids=["heads", "head-dims", "joint"])
@pytest.mark.parametrize("ratio", [0.25, 0.6])
def test_swin_width_below_and_above_half(tmp_path, attention, ratio):
    """Swin: torch-pruning plans heads, head dims or both, and neurons, with the stages' streams left whole (its stem
    and patch merging are not pruned; the bias tables are hidden from it); vitprune cuts each head with its bias
    column. Whole heads and neurons equal the model with them masked; counts equal FlopCounterMode; the save loads."""
    model = tracked("swin_tiny_patch4_window7_224", SWIN_TINY)
    masked = copy.deepcopy(model)
    plan = prune_width(model, ratio, embed=False, **attention)
    assert plan.embed is None and plan.neurons
    assert bool(plan.heads) == (attention["heads"] > 0) and bool(plan.head_dims) == (attention["head_dims"] > 0)
    views = vitprune.get_adapter(model).blocks()
    assert all(v.attn.num_heads >= 1 and v.attn.module.relative_position_bias_table.shape[1] == v.attn.num_heads
               for v in views)
    x = _input(model)
    if not plan.head_dims:  # whole heads and neurons only: the same function as masking them
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
    plan = plan_width(model, 0.5, heads=1.0, head_dims=0.0, embed=False)
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
    ratio, plan = prune_width_to_macs(model, MacTarget.relative(0.5, convention="linear"), steps=8)
    reached = count_macs(model, convention="linear").macs
    assert 0.45 * dense < reached <= 0.5 * dense and 0 < ratio < 0.95
    assert vitprune.get_recipe(model).edits[-1].op == "prune_embed_dims" and plan.embed is not None
    with pytest.raises(VitpruneError, match="is not below the model's .* there is nothing to prune"):
        prune_width_to_macs(model, MacTarget.absolute(reached, convention="linear"))
    floor = copy.deepcopy(model)
    prune_width(floor, 0.95, **HEAD_DIMS)
    with pytest.raises(UnreachableTargetError, match=f"width pruning cannot reach 1K MACs per image .*; the nearest it "
                                                     f"reaches is {format_count(count_macs(floor).macs)}"):
        prune_width_to_macs(model, MacTarget.absolute(1000), **HEAD_DIMS)


def _widths(model):
    """The stream width, and per block the FFN width, the attention width and the head width."""
    adapter = vitprune.get_adapter(model)
    return [adapter.embed_dim] + [w for v in adapter.blocks() for w in (
        v.mlp.hidden_features, v.attn.num_heads * v.attn.head_dim, v.attn.head_dim)]


@pytest.mark.parametrize("attention", [HEAD_DIMS, {"heads": 1.0, "head_dims": 0.0}, JOINT],
                         ids=["head-dims", "heads", "joint"])
def test_round_to_keeps_every_width_a_multiple(attention):
    """deit_small (384 wide, 6 heads of 64, 1536 neurons) at ratio 0.2: unrounded, widths such as 307 or 50 remain."""
    model = _model("deit_small_patch16_224", depth=3)
    reference = copy.deepcopy(model)
    prune_width(reference, 0.2, **attention)
    prune_width(model, 0.2, round_to=8, **attention)
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
    with pytest.raises(VitpruneError, match=r"head_dims \(a share of the width ratio\) must be in \[0, 1\], got 1.5"):
        plan_width(model, 0.5, head_dims=1.5)
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
