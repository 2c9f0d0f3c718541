"""Every family's adapter describes every supported ViT faithfully (one suite over the families); the timm adapter
rejects what it cannot represent (the Hugging Face adapter's refusals: test_hf_vit.py)."""

from __future__ import annotations

import pytest
import timm
import torch
from conftest import build, tracked
from timm.layers import GluMlp, LayerScale, SwiGLU
from timm.models.vision_transformer import ParallelScalingBlock, VisionTransformer
from torch import nn

from vitprune.adapters import HFViTAdapter, LVViTAdapter, TimmViTAdapter, get_adapter
from vitprune.surgery import prune_depth
from vitprune.errors import UnsupportedArchitectureError

EXPECTED = {
    # name: (adapter, embed_dim, heads, mlp hidden, prefix tokens, grid, input px, classifier heads, layer scale,
    #        classifier reads [CLS] alone)
    "deit_tiny_patch16_224": (TimmViTAdapter, 192, 3, 768, 1, (14, 14), 224, 1, False, True),
    "deit_tiny_distilled_patch16_224": (TimmViTAdapter, 192, 3, 768, 2, (14, 14), 224, 2, False, False),
    "deit_small_patch16_224": (TimmViTAdapter, 384, 6, 1536, 1, (14, 14), 224, 1, False, True),
    "deit_base_patch16_224": (TimmViTAdapter, 768, 12, 3072, 1, (14, 14), 224, 1, False, True),
    "deit_small_distilled_patch16_224": (TimmViTAdapter, 384, 6, 1536, 2, (14, 14), 224, 2, False, False),
    "vit_small_patch14_dinov2": (TimmViTAdapter, 384, 6, 1536, 1, (4, 4), 56, 0, True, True),
    "vit_base_patch16_gap_224": (TimmViTAdapter, 768, 16, 3072, 0, (7, 7), 112, 1, False, False),
    "hf:ViTForImageClassification": (HFViTAdapter, 64, 4, 256, 1, (4, 4), 32, 1, False, True),
    "hf:DeiTForImageClassification": (HFViTAdapter, 64, 4, 256, 2, (4, 4), 32, 1, False, True),
    "hf:DeiTForImageClassificationWithTeacher": (HFViTAdapter, 64, 4, 256, 2, (4, 4), 32, 2, False, False),
    # The tiny row (LVVIT_TINY): its skip_lam is a LayerScale, and the token-labelling head is a second head.
    "vitprune:lvvit-s": (LVViTAdapter, 64, 4, 192, 1, (4, 4), 32, 2, True, True),
}


# One token stream of one width through every block (Swin's windows and stages: tests/adapters/test_swin.py).
@pytest.mark.needs("head_width", "embed_width")
def test_adapter_describes_structure(model_spec):
    name, kwargs = model_spec
    model = build(name, kwargs)
    adapter = get_adapter(model)
    family, dim, heads, hidden, prefix, grid, px, n_heads, has_ls, _ = EXPECTED[name]
    assert type(adapter) is family
    assert adapter.embed_dim == dim
    assert adapter.num_prefix_tokens == prefix
    assert adapter.grid_size == grid
    assert adapter.num_tokens == prefix + grid[0] * grid[1]
    assert adapter.input_size == (3, px, px)
    assert len(adapter.classifier_heads()) == n_heads
    blocks = adapter.blocks()
    assert len(blocks) == 12
    for i, view in enumerate(blocks):
        assert view.index == i and view.module is model.get_submodule(view.name)
        assert view.attn.num_heads == heads and view.attn.attn_dim == dim
        assert view.attn.qkv.widths == (dim,) * 3
        assert [lin.out_features for lin in view.attn.qkv.linears] == ([3 * dim] if view.attn.qkv.fused else [dim] * 3)
        assert view.attn.proj.in_features == dim
        assert view.mlp.hidden_features == hidden
        assert isinstance(view.ls1, LayerScale) == has_ls and isinstance(view.ls2, LayerScale) == has_ls


def _block_from_view(view, x):
    """Recompute a block from the adapter's description: pre-norm residual attention, then MLP."""
    a = view.attn
    if a is not None:
        h = view.norm1(x)
        b, n, _ = h.shape
        q, k, v = (t.reshape(b, n, a.num_heads, a.head_dim).transpose(1, 2) for t in a.qkv(h))
        q, k = a.q_norm(q), a.k_norm(k)
        attn = ((q * a.head_dim ** -0.5) @ k.transpose(-2, -1)).softmax(-1)
        h = a.proj((attn @ v).transpose(1, 2).reshape(b, n, a.attn_dim))
        x = x + view.drop_path1(view.ls1(h))
    elif view.norm1 is not None:  # attention removed, its branch reduced to the norm
        x = x + view.drop_path1(view.ls1(view.norm1(x)))
    m = view.mlp
    h = m.fc1(view.norm2(x))
    if not m.merged:
        h = m.fc2(m.act(h))
    return view.act(x + view.drop_path2(view.ls2(h)))


@pytest.mark.needs("head_width", "embed_width")
def test_view_reproduces_block_forward(model_spec):
    """The head layout of q, k and v and the sublayer order the views document are the ones the model runs."""
    name, kwargs = model_spec
    model = build(name, kwargs)
    adapter = get_adapter(model)
    torch.manual_seed(1)
    x = torch.randn(2, adapter.num_tokens, adapter.embed_dim)
    with torch.no_grad():
        for view in adapter.blocks()[:3]:
            torch.testing.assert_close(_block_from_view(view, x), view.module(x), rtol=1e-5, atol=1e-5)


@pytest.mark.needs("attention_removal", "embed_width")
@pytest.mark.parametrize("identity", ["norm", "skip"])
def test_view_reproduces_depth_pruned_blocks(small_model_spec, identity):
    """Blocks without attention, with a merged MLP or an output activation are described faithfully too."""
    name, kwargs = small_model_spec
    model = tracked(name, kwargs)
    prune_depth(model, [0, 1], [1, 2], identity=identity, output_gelu=True)
    adapter = get_adapter(model)
    views = adapter.blocks()
    assert views[0].attn is None and (views[0].norm1 is None) == (identity == "skip")
    assert views[1].mlp.merged and isinstance(views[1].act, nn.GELU) and isinstance(views[0].act, nn.Identity)
    torch.manual_seed(1)
    x = torch.randn(2, adapter.num_tokens, adapter.embed_dim)
    with torch.no_grad():
        for view in views[:3]:
            torch.testing.assert_close(_block_from_view(view, x), view.module(x), rtol=1e-5, atol=1e-5)


def _tiny_vit(**kwargs) -> VisionTransformer:
    return VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=4, **kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mlp_layer": SwiGLU}, r"blocks\.0\.mlp is SwiGLU .*gated"),
        ({"mlp_layer": GluMlp}, r"blocks\.0\.mlp is GluMlp .*gated"),
        ({"block_fn": ParallelScalingBlock}, r"blocks\.0 is ParallelScalingBlock"),
        ({"scale_mlp_norm": True}, r"blocks\.0\.mlp is Mlp .*scale_mlp_norm"),
    ],
    ids=["swiglu", "glu", "parallel-block", "mlp-norm"],
)
def test_unrepresentable_structures_are_rejected(kwargs, match):
    with pytest.raises(UnsupportedArchitectureError, match=match):
        get_adapter(_tiny_vit(**kwargs))


def test_non_vit_is_rejected():
    with pytest.raises(UnsupportedArchitectureError, match="ResNet is not a supported vision transformer"):
        get_adapter(timm.create_model("resnet10t", pretrained=False))


def test_setters_validate_shapes():
    adapter = get_adapter(_tiny_vit())
    with pytest.raises(ValueError, match="do not fit 1 heads"):
        adapter.set_attention(0, qkv=(nn.Linear(32, 96),), proj=nn.Linear(16, 32), num_heads=1)
    with pytest.raises(ValueError, match="fc1 gives 8 features, fc2 takes 9"):
        adapter.set_mlp(0, fc1=nn.Linear(32, 8), fc2=nn.Linear(9, 32))


def test_merged_mlp_is_represented():
    """After activation removal and merging, the MLP is one linear layer and the block computes exactly that."""
    model = _tiny_vit().eval()
    adapter = get_adapter(model)
    with pytest.raises(ValueError, match="is not merged"):
        adapter.set_mlp(1, nn.Linear(32, 32), None)
    adapter.merge_mlp(1, nn.Linear(32, 32))
    merged = nn.Linear(32, 32)
    adapter.set_mlp(1, merged, None)
    with pytest.raises(ValueError, match="merged, so it takes a single Linear"):
        adapter.set_mlp(1, nn.Linear(32, 8), nn.Linear(8, 32))
    view = get_adapter(model).block(1).mlp
    assert view.merged and view.fc1 is merged and view.fc2 is None and view.hidden_features is None
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        torch.testing.assert_close(view.module(x), merged(x), rtol=0, atol=0)


def test_pre_logits_are_what_the_classifier_reads(model_spec):
    """Class token, average pooling, LayerScale and the two tokens of a distilled DeiT all give (B, embed_dim)."""
    name, kwargs = model_spec
    model = build(name, kwargs)
    adapter = get_adapter(model)
    torch.manual_seed(1)
    x = torch.randn(2, *adapter.input_size)
    heads = adapter.classifier_heads()
    with torch.no_grad():
        features = adapter.pre_logits(x)
        # The width the classifier reads: the stream's, or a convolutional family's last stage's.
        assert features.shape == (2, heads[0].in_features if heads else adapter.embed_dim)
        if len(heads) == 1:
            torch.testing.assert_close(heads[0](features), model(x))
        elif isinstance(adapter, LVViTAdapter):  # the class head, plus half the token-labelling head's maximum
            patches = model.forward_features(x)[:, adapter.num_prefix_tokens:]
            torch.testing.assert_close(heads[0](features) + 0.5 * heads[1](patches).amax(dim=1), model(x))
        elif heads:  # a distillation head: the features are the mean of the two tokens (each head reads one)
            normed = model.forward_features(x) if isinstance(adapter, TimmViTAdapter) else \
                model.hf.base_model(pixel_values=x).last_hidden_state
            torch.testing.assert_close(features, (normed[:, 0] + normed[:, 1]) / 2)


@pytest.mark.needs("token_reduction")
def test_embed_blocks_pool_is_pre_logits(model_spec):
    """The pieces a relevance pass runs one by one (tokens in, each block's module, final norm and pooling) are the
    model's own forward; a model whose classifier reads [CLS] alone says it pools the class token."""
    name, kwargs = model_spec
    model = build(name, kwargs).eval()
    adapter = get_adapter(model)
    torch.manual_seed(1)
    x = torch.randn(2, *adapter.input_size)
    with torch.no_grad():
        tokens = adapter.embed(x)
        assert tokens.shape == (2, adapter.num_tokens, adapter.embed_dim)
        for view in adapter.blocks():
            tokens = view.module(tokens)
        torch.testing.assert_close(adapter.pool(tokens), adapter.pre_logits(x), rtol=0, atol=0)
    assert adapter.pools_class_token == EXPECTED[name][-1]


@pytest.mark.parametrize("name, mean", [("deit_tiny_patch16_224", (0.485, 0.456, 0.406)),
                                        ("vit_base_patch16_224", (0.5, 0.5, 0.5))])
def test_timm_models_are_fed_as_their_weights_were_trained(name, mean):
    """timm's pretrained config names each weight's normalisation: ImageNet's for DeiT, [-1, 1] for the augreg ViTs."""
    config = get_adapter(timm.create_model(name, pretrained=False, depth=1)).data_config
    assert config["mean"] == mean and config["interpolation"] == "bicubic" and config["crop_pct"] == 0.9

