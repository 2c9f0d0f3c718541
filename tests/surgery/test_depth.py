"""Depth surgery is exact: the physically pruned model equals the gated model with the same masks."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import build, tracked
from hypothesis import strategies as st
from strategies import EXAMPLES, property_test, small_vits
from timm.layers import SwiGLU
from timm.models.vision_transformer import Block, VisionTransformer
from torch import nn

import vitprune
from vitprune.adapters.timm_blocks import DepthBlock
from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.measure import count_macs
from vitprune.surgery import (
    add_depth_gates, merge_linear_mlps, merge_linears, prune_depth, prune_gated, remove_activation,
)

ATTENTION, ACTIVATION = [0, 3, 7, 8, 11], [2, 7, 8, 10, 11]


def _perturb(model):
    """Give norms and LayerScales non-trivial values, so folding them is really tested."""
    torch.manual_seed(5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "gamma" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


def _tracked(name, kwargs):
    return _perturb(tracked(name, kwargs))


def _input(model, batch=2):
    torch.manual_seed(3)
    return torch.randn(batch, *vitprune.get_adapter(model).input_size)


def _out(model, x):
    with torch.no_grad():
        return model(x)


def _assert_pruned_equals_gated(model, attention, activation, **options):
    gated = copy.deepcopy(model)
    gates = add_depth_gates(gated, identity=options.get("identity", "norm"),
                            output_gelu=options.get("output_gelu", False))
    gates.set_masks(attention, activation)
    prune_depth(model, attention, activation, **options)
    x = _input(model)
    expected = _out(gated, x)
    assert (_out(model, x) - expected).abs().max().item() <= 1e-4
    # The gated model's own masks turned into structure give the same model.
    prune_gated(gated, gates, fold_norm=options.get("fold_norm", False))
    assert (_out(gated, x) - expected).abs().max().item() <= 1e-4
    return expected


@pytest.mark.parametrize("fold_norm", [False, True], ids=["ln2-kept", "ln2-folded"])
def test_activation_removal_and_merge_equal_the_identity_activation(small_model_spec, fold_norm, tmp_path):
    """Every family that can lose activations (ConvNeXt too, which has no attention or gates): the merged Linear, with
    any LayerScale and, folded, the norm's affine inside it, computes what fc2(fc1(x)) did; a save loads bit-exact."""
    name, kwargs = small_model_spec
    model = _tracked(name, kwargs)
    reference = copy.deepcopy(model)
    blocks = [1, 4, 5]
    for block in blocks:  # the activation replaced by the identity, everything else as it was
        vitprune.get_adapter(reference).set_activation(block, nn.Identity())
    params = count_macs(model).params
    hidden = {b: vitprune.get_adapter(model).block(b).mlp for b in blocks}
    prune_depth(model, activation=blocks, fold_norm=fold_norm)
    x = _input(model)
    assert (_out(model, x) - _out(reference, x)).abs().max().item() <= 1e-4
    views = vitprune.get_adapter(model).blocks()
    assert all(views[b].mlp.merged and isinstance(views[b].ls2, nn.Identity) for b in blocks)
    # Each MLP of d -> h -> d (2dh + h + d parameters) is now one d x d Linear; its LayerScale (d) folded away, and
    # with fold_norm the norm's affine (2d) too.
    folded = [vitprune.get_adapter(reference).block(b) for b in blocks]
    saved = sum(2 * m.fc1.in_features * m.hidden_features + m.hidden_features - m.fc1.in_features ** 2
                for m in hidden.values())
    saved += sum(sum(p.numel() for p in view.ls2.parameters()) for view in folded)
    saved += sum(sum(p.numel() for p in view.norm2.parameters()) for view in folded) if fold_norm else 0
    assert count_macs(model).params == params - saved
    vitprune.save(model, tmp_path / "m")
    assert torch.equal(_out(vitprune.load(tmp_path / "m"), x), _out(model, x))


@pytest.mark.needs("attention_removal", "gates")
def test_pruned_equals_gated(model_spec):
    name, kwargs = model_spec
    model = _tracked(name, kwargs)
    dense = _out(model, _input(model))
    pruned = _assert_pruned_equals_gated(model, ATTENTION, ACTIVATION)
    assert (pruned - dense).abs().max().item() > 1e-2  # the layers really were removed
    views = vitprune.get_adapter(model).blocks()
    assert [v.index for v in views if v.attn is None] == ATTENTION
    assert [v.index for v in views if v.mlp.merged] == ACTIVATION
    for i in ACTIVATION:  # the block's own width: Swin's stages differ
        dim = views[i].norm2.normalized_shape[0]
        assert views[i].mlp.fc1.weight.shape == (dim, dim) and views[i].mlp.fc2 is None


@pytest.mark.parametrize("identity", ["norm", "skip"])
@pytest.mark.parametrize("output_gelu", [False, True], ids=["paper", "output-gelu"])
@pytest.mark.needs("attention_removal", "gates")
@pytest.mark.parametrize("fold_norm", [False, True], ids=["ln2-kept", "ln2-folded"])
def test_every_option_is_exact(small_model_spec, identity, output_gelu, fold_norm):
    name, kwargs = small_model_spec
    _assert_pruned_equals_gated(_tracked(name, kwargs), [1, 4, 5], [4, 5, 9], identity=identity,
                                output_gelu=output_gelu, fold_norm=fold_norm)


@pytest.mark.slow
def test_digits_model_is_exact(trained_digits):
    model = copy.deepcopy(trained_digits)
    _assert_pruned_equals_gated(model, ATTENTION, ACTIVATION)


@pytest.mark.needs("attention_removal", "gates")
def test_removing_nothing_is_the_identity(small_model_spec):
    name, kwargs = small_model_spec
    model = _tracked(name, kwargs)
    x = _input(model)
    dense = _out(model, x)
    gated = copy.deepcopy(model)
    add_depth_gates(gated, output_gelu=True)
    assert torch.equal(_out(gated, x), dense)
    prune_depth(model, [], [])
    assert torch.equal(_out(model, x), dense) and vitprune.get_recipe(model).edits == []


@pytest.mark.needs("attention_removal", "gates")
def test_save_load_round_trip(tmp_path, small_model_spec):
    name, kwargs = small_model_spec
    model = _tracked(name, kwargs)
    prune_depth(model, [0, 5], [5, 6], identity="skip", fold_norm=True, output_gelu=True)
    vitprune.save(model, tmp_path / "pruned")
    loaded = vitprune.load(tmp_path / "pruned")
    x = _input(model)
    assert torch.equal(_out(loaded, x), _out(model, x))
    assert [(e.op, e.args) for e in vitprune.get_recipe(loaded).edits] == [
        ("remove_attention", {"block": 0, "identity": "skip"}),
        ("remove_attention", {"block": 5, "identity": "skip"}),
        ("remove_activation", {"block": 5, "fold_norm": True, "merge": True}),
        ("remove_activation", {"block": 6, "fold_norm": True, "merge": True}),
        ("add_output_activation", {"block": 5, "act": "gelu"}),
    ]


@pytest.mark.needs("attention_removal", "gates")
def test_unmerged_removal_then_merge_is_exact(small_model_spec, tmp_path):
    """HetDPT fine-tunes fc1 and fc2 apart and merges afterwards: both states equal the gated model."""
    name, kwargs = small_model_spec
    model = _tracked(name, kwargs)
    params = count_macs(model).params
    view = vitprune.get_adapter(model).block(2)
    folded = sum(p.numel() for p in view.ls1.parameters())  # LayerScale folds into LN1
    attention = sum(p.numel() for p in view.attn.module.parameters())
    expected = _assert_pruned_equals_gated(model, [2], [3, 4], merge=False)
    dim = view.attn.proj.out_features  # the block's stream (Swin's stages differ)
    # The unmerged linears keep all their weights: only the attention's go (q, k, v and proj, with their biases,
    # and Swin's relative-position bias table).
    projections = sum(p.numel() for linear in (*view.attn.qkv.linears, view.attn.proj) for p in linear.parameters())
    assert projections == 4 * dim * dim + dim + 3 * dim * (view.attn.qkv.linears[0].bias is not None)
    table = getattr(view.attn.module, "relative_position_bias_table", None)
    assert attention == projections + (0 if table is None else table.numel())
    assert count_macs(model).params == params - attention - folded
    views = vitprune.get_adapter(model).blocks()
    assert not views[3].mlp.has_activation and not views[3].mlp.merged and views[5].mlp.has_activation
    with pytest.raises(VitpruneError, match="block 3 has no activation left to remove"):
        prune_depth(model, [], [3])
    vitprune.save(model, tmp_path / "unmerged")
    assert merge_linear_mlps(model) == [3, 4]
    x = _input(model)
    assert (_out(model, x) - expected).abs().max().item() <= 1e-4
    assert [e.op for e in vitprune.get_recipe(model).edits][-2:] == ["merge_mlp", "merge_mlp"]
    assert merge_linear_mlps(model) == []
    loaded = vitprune.load(tmp_path / "unmerged")
    assert (_out(loaded, x) - expected).abs().max().item() <= 1e-4
    with pytest.raises(ValueError, match="fold_norm folds into the merged Linear"):
        remove_activation(loaded, 6, fold_norm=True, merge=False)


def test_structure_is_plain_modules():
    """Identity attention keeps timm's Block only where possible, LayerScale is folded, nothing is gated."""
    model = _tracked("vit_small_patch14_dinov2", {"img_size": 56})
    prune_depth(model, [2], [2, 3])
    assert type(model.blocks[2]) is DepthBlock and type(model.blocks[3]) is Block
    block = model.blocks[2]
    assert block.attn is None and isinstance(block.ls1, nn.Identity) and isinstance(block.ls2, nn.Identity)
    assert isinstance(model.blocks[3].ls2, nn.Identity) and isinstance(model.blocks[3].ls1, nn.Module)
    names = {type(m).__name__ for m in model.modules()}
    assert not names & {"Gate", "GatedLayer", "RemovedActivation"}


@pytest.mark.slow
def test_compile_and_onnx_export_handle_the_pruned_model(tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")  # torch's exporter needs it
    model = _tracked("deit_tiny_patch16_224", {})
    prune_depth(model, [0, 3], [3, 4], identity="skip", output_gelu=True)
    x = _input(model, batch=1)
    expected = _out(model, x)
    compiled = torch.compile(model, backend="eager", fullgraph=True)  # fullgraph: no graph breaks allowed
    assert torch.equal(_out(compiled, x), expected)
    torch.onnx.export(model, (x,), dynamo=True).save(str(tmp_path / "pruned.onnx"))
    session = onnxruntime.InferenceSession(str(tmp_path / "pruned.onnx"))
    got = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
    assert (got - expected).abs().max().item() <= 1e-4


def test_merge_linears_algebra():
    torch.manual_seed(0)
    fc1, fc2, scale = nn.Linear(6, 10), nn.Linear(10, 6), torch.randn(6)
    merged = merge_linears(fc1, fc2, scale)
    x = torch.randn(4, 6)
    with torch.no_grad():
        torch.testing.assert_close(merged(x), scale * fc2(fc1(x)), rtol=1e-6, atol=1e-6)
    assert merged.weight.shape == (6, 6)


def test_params_saved_per_layer_follow_the_closed_form():
    """Attention removal saves 4D^2 + 4D parameters, activation removal 7D^2 + 4D (hidden 4D)."""
    model = vitprune.track(build("deit_tiny_patch16_224", {}), "deit_tiny_patch16_224")
    d = 192
    before = count_macs(model).params
    prune_depth(model, [1], [])
    assert count_macs(model).params == before - (4 * d * d + 4 * d)
    prune_depth(model, [], [1])
    assert count_macs(model).params == before - (4 * d * d + 4 * d) - (7 * d * d + 4 * d)


# Paper Table 1 (HetDPT, 10 layers on DeiT-B and 8 layers on DeiT-S). The published models are
# distilled DeiTs counted with Linear/Conv MACs only at 198 tokens (notes/hetdpt.md section 1.8.4).
PAPER_ROWS = [
    ("deit_base_distilled_patch16_224", ATTENTION, ACTIVATION, 54_867_152, 10_511_020_032, 10_932_541_440),
    ("deit_small_distilled_patch16_224", [1, 7, 10, 11], [7, 8, 10, 11], 15_936_080, 2_978_199_552, 3_219_068_928),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, attention, activation, params, linear_macs, full_macs", PAPER_ROWS,
                         ids=["deit_base_10", "deit_small_8"])
def test_paper_table1_structure(name, attention, activation, params, linear_macs, full_macs):
    """Params 54.9M / 15.9M and MACs 10.5G / 3.0G as the paper reports, in its linear-only convention."""
    model = vitprune.track(build(name, {}), name)
    prune_depth(model, attention, activation)
    assert count_macs(model).params == params
    assert count_macs(model, convention="linear").macs == linear_macs
    assert count_macs(model, convention="full").macs == full_macs


def test_bad_indices_are_clear_errors():
    model = vitprune.track(build("deit_tiny_patch16_224", {}), "deit_tiny_patch16_224")
    with pytest.raises(VitpruneError, match=r"attention index 12 is out of range: the model has 12 blocks \(0-11\)"):
        prune_depth(model, [3, 12], [])
    with pytest.raises(VitpruneError, match="activation index 4 is given more than once"):
        prune_depth(model, [], [4, 2, 4])
    with pytest.raises(VitpruneError, match="unknown attention identity 'zero'"):
        prune_depth(model, [1], [], identity="zero")
    prune_depth(model, [1], [2])
    with pytest.raises(VitpruneError, match="block 1 has no attention left to remove"):
        prune_depth(model, [1], [])
    with pytest.raises(VitpruneError, match="block 2 has no activation left to remove"):
        prune_depth(model, [], [2])
    with pytest.raises(ValueError, match="block 2 has no MLP hidden neurons"):
        vitprune.surgery.prune_mlp_neurons(model, 2, [0])
    with pytest.raises(ValueError, match="block 1 has no attention to prune"):
        vitprune.surgery.prune_heads(model, 1, [0])
    assert len(vitprune.get_recipe(model).edits) == 2  # failed edits are not recorded


def test_gated_mlp_is_unsupported():
    model = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=4,
                              mlp_layer=SwiGLU)
    with pytest.raises(UnsupportedArchitectureError, match=r"blocks\.0\.mlp is SwiGLU"):
        remove_activation(vitprune.track(model, "custom"), 0)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_removal_and_merge_equal_the_gated_model_for_any_layers(examples):
    """Random small ViTs, random attention and activation layers, random options: the pruned model (GELU-free MLPs
    merged into one Linear) equals the model whose gates mask the same layers."""
    @property_test(examples, st.data())
    def check(data):
        model = data.draw(small_vits())
        depth = len(vitprune.get_adapter(model).blocks())
        layers = st.sets(st.integers(0, depth - 1))
        attention, activation = sorted(data.draw(layers)), sorted(data.draw(layers))
        options = {"identity": data.draw(st.sampled_from(["norm", "skip"])), "fold_norm": data.draw(st.booleans()),
                   "output_gelu": data.draw(st.booleans())}
        _assert_pruned_equals_gated(model, attention, activation, **options)
        assert [v.index for v in vitprune.get_adapter(model).blocks() if v.mlp.merged] == activation

    check()
