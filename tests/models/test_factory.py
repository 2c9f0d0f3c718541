"""Model names, checkpoints and provenance recorded in the recipe."""

from __future__ import annotations

import hashlib

import pytest
import safetensors.torch
import torch

import vitprune
from vitprune.errors import VitpruneError


def test_timm_model_gets_a_recipe_with_its_kwargs():
    model = vitprune.create_model("deit_tiny_patch16_224", img_size=112)
    base = vitprune.get_recipe(model).base
    assert (base.source, base.name, base.kwargs, base.weights) == ("timm", "deit_tiny_patch16_224", {"img_size": 112},
                                                                   "random")
    assert vitprune.get_adapter(model).input_size == (3, 112, 112) and not model.training


def test_checkpoint_weights_and_provenance(tmp_path):
    torch.manual_seed(0)
    source = vitprune.create_model("deit_tiny_patch16_224")
    path = tmp_path / "w.safetensors"
    safetensors.torch.save_model(source, str(path))
    model = vitprune.create_model("deit_tiny_patch16_224", checkpoint=path)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), source.state_dict().values()))
    base = vitprune.get_recipe(model).base
    assert base.weights == f"checkpoint:{path}" and base.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_pretrained_and_checkpoint_are_exclusive(tmp_path):
    with pytest.raises(VitpruneError, match="either pretrained weights or a checkpoint"):
        vitprune.create_model("deit_tiny_patch16_224", pretrained=True, checkpoint=tmp_path / "x.pth")


def test_resolve_model_reads_saved_directories(tmp_path):
    saved = vitprune.save(vitprune.create_model("digits-vit"), tmp_path / "m")
    assert vitprune.get_recipe(vitprune.resolve_model(str(saved))).base.name == "digits-vit"
    with pytest.raises(VitpruneError, match="is a saved model with its own weights; --checkpoint does not apply"):
        vitprune.resolve_model(str(saved), checkpoint=tmp_path / "w.pth")
