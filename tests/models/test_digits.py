"""The digits ViT: a 12-block DeiT-style timm model, and (slow) that it trains past 95% on two cores."""

from __future__ import annotations

import pytest
import torch
from timm.layers import build_sincos2d_pos_embed
from timm.models.vision_transformer import VisionTransformer

from vitprune.adapters import get_adapter
from vitprune.data import DigitsDataset, build_loader
from vitprune.models.digits import DIGITS_TRAIN_CONFIG, DIGITS_VIT_KWARGS, build_digits_vit, train_digits_vit
from vitprune.training import evaluate


def test_kwargs_describe_a_deit_style_model():
    assert DIGITS_VIT_KWARGS["depth"] == 12
    assert (DIGITS_VIT_KWARGS["img_size"], DIGITS_VIT_KWARGS["patch_size"], DIGITS_VIT_KWARGS["in_chans"]) == (32, 4, 1)
    assert DIGITS_VIT_KWARGS["num_classes"] == 10
    assert DIGITS_VIT_KWARGS["mlp_ratio"] == 4.0
    assert DIGITS_VIT_KWARGS["embed_dim"] % DIGITS_VIT_KWARGS["num_heads"] == 0


def test_build_digits_vit_structure():
    model = build_digits_vit().eval()
    assert type(model) is VisionTransformer
    adapter = get_adapter(model)
    assert len(adapter.blocks()) == 12
    assert adapter.input_size == (1, 32, 32)
    assert adapter.num_prefix_tokens == 1 and adapter.num_tokens == 65
    assert adapter.embed_dim == DIGITS_VIT_KWARGS["embed_dim"]
    assert {b.attn.num_heads for b in adapter.blocks()} == {DIGITS_VIT_KWARGS["num_heads"]}
    assert {b.mlp.hidden_features for b in adapter.blocks()} == {4 * DIGITS_VIT_KWARGS["embed_dim"]}
    assert type(model.blocks[0].mlp.act) is torch.nn.GELU
    with torch.no_grad():
        assert model(torch.zeros(2, 1, 32, 32)).shape == (2, 10)


def test_build_digits_vit_overrides():
    model = build_digits_vit(depth=2, num_classes=3)
    assert len(model.blocks) == 2 and model.num_classes == 3


def test_position_embeddings_start_as_sincos():
    model = build_digits_vit()
    expected = build_sincos2d_pos_embed([8, 8], DIGITS_VIT_KWARGS["embed_dim"])
    assert torch.equal(model.pos_embed[0, 1:].detach(), expected)


def test_init_is_deterministic_for_a_seed():
    torch.manual_seed(0)
    a = build_digits_vit().state_dict()
    torch.manual_seed(0)
    b = build_digits_vit().state_dict()
    torch.manual_seed(1)
    c = build_digits_vit().state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["blocks.0.attn.qkv.weight"], c["blocks.0.attn.qkv.weight"])


@pytest.mark.slow
def test_train_digits_vit_passes_95_percent():
    model, metrics = train_digits_vit(seed=0, progress=False)
    assert set(metrics) == {"val_top1", "val_top5", "val_loss", "epochs", "seconds", "seed"}
    assert metrics["val_top1"] >= 0.95
    assert metrics["epochs"] == DIGITS_TRAIN_CONFIG["epochs"] and metrics["seed"] == 0
    assert metrics["seconds"] > 0
    assert model.training is False
    val = evaluate(model, build_loader(DigitsDataset("val"), 100, shuffle=False, seed=0))
    assert val["top1"] == metrics["val_top1"] and val["count"] == 360
