"""A family declares what can be done to it; a method that needs more refuses, before any work, in one line that
names the family and what it lacks."""

from __future__ import annotations

import pytest
import torch
from timm.models.vision_transformer import VisionTransformer

import vitprune
import vitprune.adapters as adapters
from vitprune.adapters import CAPABILITIES, TimmViTAdapter, get_adapter
from vitprune.errors import UnsupportedArchitectureError
from vitprune.methods.hetdpt import HetDPTRun
from vitprune.methods.hetdpt.pipeline import run_hetdpt
from vitprune.methods.hiap import run_hiap
from vitprune.methods.hiap import HiAPRun
from vitprune.methods.star.config import WITHOUT_LRP
from vitprune.methods.star.pipeline import STARConfig, run_star
from vitprune.runs import MethodData, RunContext
from vitprune.surgery import prune_depth
from vitprune.training import TrainConfig


class _OtherViT(VisionTransformer):
    """A family of its own for the test: timm's ViT under another adapter that supports less."""


class _Limited(TimmViTAdapter):
    family = "limited-vit"
    capabilities = frozenset(CAPABILITIES) - {"lrp", "gates", "attention_removal"}

    @classmethod
    def matches(cls, model) -> bool:
        return isinstance(model, _OtherViT)


@pytest.fixture
def limited(monkeypatch):
    monkeypatch.setattr(adapters, "ADAPTERS", [_Limited, *adapters.ADAPTERS])
    torch.manual_seed(0)
    return _OtherViT(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=3)


@pytest.mark.parametrize("method, call, lacking, way", [
    ("depth pruning", lambda m, d: prune_depth(m, attention=[0]), "remove attention sublayers", ""),
    ("HetDPT", lambda m, d: run_hetdpt(m, MethodData(), HetDPTRun(1), RunContext(d)),
     "remove attention sublayers and train gates on its sublayers, heads and neurons", ""),
    ("HiAP", lambda m, d: run_hiap(m, MethodData(), HiAPRun(TrainConfig(epochs=1)), RunContext(d)),
     "train gates on its sublayers, heads and neurons", ""),
    # STAR does without the LRP prior, and says how.
    ("STAR", lambda m, d: run_star(m, MethodData(), STARConfig(alpha=0.5), RunContext(d)),
     "propagate LRP relevance through its blocks", f"; {WITHOUT_LRP}"),
])
def test_a_method_refuses_what_the_family_lacks(limited, tmp_path, method, call, lacking, way):
    assert get_adapter(limited).family == "limited-vit"
    with pytest.raises(UnsupportedArchitectureError) as error:
        call(limited, tmp_path / "run")
    assert str(error.value) == f"{method} needs to {lacking}, which vitprune cannot do on limited-vit models{way}"
    assert not (tmp_path / "run").exists()  # refused before any work


def test_what_the_family_has_is_not_refused(limited):
    get_adapter(limited).require("activation_removal", "ffn_width", "token_reduction", by="VBP then STAR without LRP")
    with pytest.raises(ValueError, match="unknown capabilities"):
        get_adapter(limited).require("flying", by="a test")


def test_the_timm_family_has_every_capability():
    assert TimmViTAdapter.capabilities == frozenset(CAPABILITIES)


@pytest.mark.parametrize("adapter", adapters.ADAPTERS, ids=lambda a: a.family)
def test_a_capability_is_what_the_adapter_implements(adapter):
    """Declared once: a family has a capability exactly when it implements the capability's mixin, and has none of the
    setters of one it lacks (no stubs that raise)."""
    from vitprune.adapters.base import CAPABILITY_MIXINS

    assert set(CAPABILITY_MIXINS) == set(CAPABILITIES)
    for name, mixin in CAPABILITY_MIXINS.items():
        assert (name in adapter.capabilities) == issubclass(adapter, mixin), name
        setters = [m for m in getattr(mixin, "__abstractmethods__", ()) if not isinstance(getattr(mixin, m), property)]
        for setter in setters:
            assert hasattr(adapter, setter) == (name in adapter.capabilities), (name, setter)


def test_a_capability_declared_without_its_mixin_is_refused():
    from vitprune.adapters import ConvNeXtAdapter

    with pytest.raises(TypeError, match=r"declares capabilities \['token_reduction'\] without implementing"):
        type("Bad", (ConvNeXtAdapter,), {"capabilities": frozenset({"ffn_width", "token_reduction"})})


def test_one_adapter_per_model_and_a_copy_gets_its_own():
    import copy

    from vitprune.surgery import prune_mlp_neurons

    model = vitprune.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2,
                                  num_heads=2, num_classes=3)
    adapter = get_adapter(model)
    assert get_adapter(model) is adapter and adapter.model is model
    twin = copy.deepcopy(model)
    assert get_adapter(twin) is not adapter and get_adapter(twin).model is twin
    prune_mlp_neurons(twin, 0, [0, 1])  # an edit of the copy shows in the copy's views alone
    assert get_adapter(twin).block(0).mlp.hidden_features == 2
    assert adapter.block(0).mlp.hidden_features == 128
