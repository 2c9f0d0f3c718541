"""The cluttered-MNIST ViT: its declared structure, its registration, and how the zoo trains and caches it."""

from __future__ import annotations

import pytest
import torch
from timm.layers import build_sincos2d_pos_embed
from timm.models.vision_transformer import VisionTransformer

import vitprune.models.cluttered_mnist
import vitprune.models.zoo
from vitprune.adapters import get_adapter
from vitprune.cache import cache_dir
from vitprune.data import CLUTTERED_MNIST
from vitprune.errors import VitpruneError
from vitprune.models import VITPRUNE_MODELS, create_model
from vitprune.models.cluttered_mnist import (
    CLUTTERED_MNIST_TRAIN_CONFIG,
    CLUTTERED_MNIST_VIT_KWARGS,
    build_cluttered_mnist_vit,
)
from vitprune.models.zoo import TRAINED_MODELS, trained_cluttered_mnist_vit
from vitprune.recipe import get_recipe, read_document
from vitprune.training import TrainConfig

KWARGS = CLUTTERED_MNIST_VIT_KWARGS


def test_builder_has_the_declared_structure():
    model = build_cluttered_mnist_vit().eval()
    assert type(model) is VisionTransformer
    adapter = get_adapter(model)
    assert adapter.input_size == CLUTTERED_MNIST.input_size
    grid = CLUTTERED_MNIST.input_size[1] // KWARGS["patch_size"]
    assert adapter.num_prefix_tokens == 1 and adapter.num_tokens == grid * grid + 1
    assert len(adapter.blocks()) == KWARGS["depth"]
    assert adapter.embed_dim == KWARGS["embed_dim"]
    assert {b.attn.num_heads for b in adapter.blocks()} == {KWARGS["num_heads"]}
    assert {b.mlp.hidden_features for b in adapter.blocks()} == {4 * KWARGS["embed_dim"]}
    assert torch.equal(model.pos_embed[0, 1:].detach(), build_sincos2d_pos_embed([grid, grid], KWARGS["embed_dim"]))
    with torch.no_grad():
        assert model(torch.zeros(2, *CLUTTERED_MNIST.input_size)).shape == (2, 10)


def test_recipe_is_a_valid_train_config():
    TrainConfig(**CLUTTERED_MNIST_TRAIN_CONFIG).validate()


def test_registered_by_name():
    assert VITPRUNE_MODELS["cluttered-mnist-vit"] is build_cluttered_mnist_vit
    assert TRAINED_MODELS["cluttered-mnist-vit"] is trained_cluttered_mnist_vit
    model = create_model("cluttered-mnist-vit", depth=2)
    base = get_recipe(model).base
    assert (base.source, base.name, base.kwargs, base.weights) == ("vitprune", "cluttered-mnist-vit", {"depth": 2},
                                                                   "random")
    assert len(model.blocks) == 2
    with pytest.raises(VitpruneError, match=r"trained cluttered-mnist-vit exists only for its default architecture"):
        create_model("cluttered-mnist-vit", pretrained=True, depth=2)


def test_zoo_trains_once_and_then_loads_the_cache(monkeypatch):
    """Trained (here by a stand-in that trains nothing) on first use, cached with its metrics, then loaded."""
    monkeypatch.setattr(vitprune.models.zoo, "CLUTTERED_MNIST_VIT_CACHE_NAME", "cluttered-test")
    calls = []

    def stand_in(**_):
        calls.append(1)
        return build_cluttered_mnist_vit().eval(), {"val_top1": 0.9}

    monkeypatch.setattr(vitprune.models.cluttered_mnist, "train_cluttered_mnist_vit", stand_in)
    first = trained_cluttered_mnist_vit(progress=False)
    again = create_model("cluttered-mnist-vit", pretrained=True)
    assert calls == [1]
    assert read_document(cache_dir() / "cluttered-test")["metadata"] == {"trained_on": "cluttered-mnist",
                                                                         "val_top1": 0.9}
    assert get_recipe(again).base.name == "cluttered-mnist-vit" and get_recipe(again).base.weights == "trained"
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values()))


def test_a_seeded_checkpoint_is_trained_with_its_seed_and_cached_beside_the_default(monkeypatch):
    monkeypatch.setattr(vitprune.models.zoo, "CLUTTERED_MNIST_VIT_CACHE_NAME", "cluttered-seeded")
    seeds = []

    def stand_in(*, seed=0, **_):
        seeds.append(seed)
        return build_cluttered_mnist_vit().eval(), {"val_top1": 0.9, "seed": seed}

    monkeypatch.setattr(vitprune.models.cluttered_mnist, "train_cluttered_mnist_vit", stand_in)
    trained_cluttered_mnist_vit(seed=2, progress=False)
    trained_cluttered_mnist_vit(seed=2, progress=False)
    trained_cluttered_mnist_vit(progress=False)
    assert seeds == [2, 0]  # each trained once, with its own seed
    assert read_document(cache_dir() / "cluttered-seeded-seed2")["metadata"]["seed"] == 2
    assert read_document(cache_dir() / "cluttered-seeded")["metadata"]["seed"] == 0
