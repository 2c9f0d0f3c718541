"""The digits ViT: a 12-block DeiT-style timm model, and (slow) that it trains past 95% on two cores."""

from __future__ import annotations

import pytest
import torch
from timm.layers import build_sincos2d_pos_embed
from timm.models.vision_transformer import VisionTransformer

import vitprune.models.zoo
from vitprune.adapters import get_adapter
from vitprune.cache import cache_dir
from vitprune.data import DigitsDataset, build_loader
from vitprune.models import create_model
from vitprune.models.digits import DIGITS_TRAIN_CONFIG, DIGITS_VIT_KWARGS, build_digits_vit
from vitprune.models.zoo import DIGITS_VIT_CACHE_NAME, trained_digits_vit
from vitprune.recipe import get_recipe, read_document
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
def test_trained_digits_vit_passes_95_percent(trained_digits):
    """The cached default (trained once per session through the zoo) reaches >= 95% and its metrics are stored."""
    metrics = read_document(cache_dir() / DIGITS_VIT_CACHE_NAME)["metadata"]
    assert set(metrics) == {"trained_on", "val_top1", "val_top5", "val_loss", "epochs", "seconds", "seed"}
    assert metrics["val_top1"] >= 0.95
    assert metrics["epochs"] == DIGITS_TRAIN_CONFIG["epochs"] and metrics["seed"] == 0 and metrics["seconds"] > 0
    assert trained_digits.training is False
    val = evaluate(trained_digits, build_loader(DigitsDataset("val"), 100, shuffle=False, seed=0))
    assert val["top1"] == metrics["val_top1"] and val["count"] == 360


@pytest.mark.slow
def test_second_request_loads_the_cache(trained_digits, monkeypatch):
    """Later runs reuse the cached model instead of training again, and get identical weights."""
    import vitprune.models.digits

    monkeypatch.setattr(vitprune.models.digits, "train_digits_vit", lambda **_: pytest.fail("trained again"))
    again = create_model("digits-vit", pretrained=True)
    assert get_recipe(again).base.weights == "trained"
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), trained_digits.state_dict().values()))


def test_unusable_cache_is_retrained(monkeypatch):
    """A corrupt cached model is replaced by training again (here a stand-in that trains nothing)."""
    import vitprune.models.digits

    path = cache_dir() / "corrupt-test"
    monkeypatch.setattr(vitprune.models.zoo, "DIGITS_VIT_CACHE_NAME", "corrupt-test")
    path.mkdir(parents=True)
    (path / "recipe.json").write_text("{broken")
    monkeypatch.setattr(vitprune.models.digits, "train_digits_vit",
                        lambda **_: (build_digits_vit().eval(), {"val_top1": 0.1}))
    model = trained_digits_vit(progress=False)
    assert read_document(path)["metadata"] == {"trained_on": "digits", "val_top1": 0.1}
    assert get_recipe(model).base.name == "digits-vit"


def test_trained_digits_takes_no_architecture_changes():
    from vitprune.errors import VitpruneError

    with pytest.raises(VitpruneError, match=r"trained digits-vit exists only for its default architecture; drop \['depth'\]"):
        create_model("digits-vit", pretrained=True, depth=2)
