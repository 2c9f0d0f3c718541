"""The factory reaches every family through the registry (``models/family.py``): a family registered from outside
is created by name, rebuilt from its recipe, saved and loaded, and gives its original weights, with no line of the
factory naming it; the factory itself names no family."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import timm
import torch

import vitprune
from vitprune.models import factory, family
from vitprune.recipe import BaseModel
from vitprune.recipe import io as recipe_io
from vitprune.surgery import prune_depth

_TOY = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=3)


@pytest.fixture
def toy(monkeypatch):
    """A family of timm ViTs named ``toy:SEED``, whose original weights are drawn under SEED."""

    def build(base: BaseModel) -> torch.nn.Module:
        return timm.create_model("vit_tiny_patch16_224", pretrained=False, **base.kwargs)

    def create(name, pretrained, checkpoint, kwargs):
        base = BaseModel(source="toy", name=name, kwargs={**_TOY, **kwargs}, weights=name if pretrained else "random")
        torch.manual_seed(int(name.removeprefix("toy:")))
        return family.with_recipe(build(base), base, checkpoint)

    toy = family.ModelFamily(source="toy", build=build, claims=lambda name: name.startswith("toy:"), create=create,
                             original=lambda base: create(base.weights, True, None, {}), names=lambda: ["toy:0"],
                             described_as="a toy model (toy:SEED)")
    monkeypatch.setattr(family, "_FAMILIES", [toy, *family.families()])
    monkeypatch.setitem(recipe_io._BASE_BUILDERS, "toy", build)
    return toy


def test_a_registered_family_is_reached_by_name_recipe_and_original(toy, tmp_path):
    model = vitprune.create_model("toy:3", pretrained=True)
    x = torch.randn(2, 3, 32, 32)
    prune_depth(model, activation=[1])
    vitprune.save(model, tmp_path / "m")
    loaded = vitprune.load(tmp_path / "m")
    torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
    original = factory.original_model(loaded)
    torch.testing.assert_close(original(x), vitprune.create_model("toy:3", pretrained=True)(x), rtol=0, atol=0)
    with pytest.raises(vitprune.VitpruneError, match=r"not a toy model \(toy:SEED\), .* \(did you mean: toy:0\?\)"):
        vitprune.create_model("toy0")


def test_the_factory_names_no_family():
    """No string or name in factory.py belongs to a family: dispatch goes through the registry."""
    tree = ast.parse(Path(factory.__file__).read_text())
    words = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    words |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    families = {"timm", "hf", "hf:", "vitprune", "transformers", "lvvit", "digits-vit", "HF_PREFIX", "VITPRUNE_MODELS"}
    assert not {word for word in words if word in families}
