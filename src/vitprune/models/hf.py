"""The Hugging Face family in the factory: ``hf:owner/name`` hub ids, ``save_pretrained`` directories and classifiers
already in memory become vitprune models with recipes that rebuild them (the family's code: :mod:`vitprune.adapters.hf`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from vitprune.adapters import hf
from vitprune.errors import VitpruneError
from vitprune.models.family import Checkpoint, ModelFamily, register_family
from vitprune.models.hub import settle_offline_mode
from vitprune.recipe import RECIPE_FILE, BaseModel, Recipe, saved_model_dir, set_recipe

#: How a MODEL argument names a Hugging Face hub model: ``hf:owner/name``.
HF_PREFIX = "hf:"
#: The provenance a recipe records for weights from a local ``save_pretrained`` directory.
_HF_DIR = "hf-dir:"


def from_transformers(model: nn.Module) -> nn.Module:
    """A transformers ViT or DeiT classifier already in memory, as a vitprune model: wrapped so that it returns
    logits, with a fresh recipe (its weights are the user's), so that it can be pruned and saved."""
    return _track(hf.HFImageClassifier(model), "user").train(model.training)


def _create(source: str, *, local: bool, pretrained: bool, checkpoint: Checkpoint) -> nn.Module:
    """A Hugging Face classifier from a ``save_pretrained`` directory (``local``) or the hub, with a fresh recipe."""
    if checkpoint is not None:
        raise VitpruneError(f"{source} is a Hugging Face model, which takes its weights from its own directory; "
                            "save other weights with save_pretrained and pass that directory")
    if not local:
        settle_offline_mode()
    if pretrained:
        model = hf.from_pretrained(source, local_files_only=local)
    else:
        model = hf.from_config(*hf.load_config(source, local_files_only=local))
    return _track(model, (_HF_DIR if local else HF_PREFIX) + source if pretrained else "random").eval()


def _track(model: nn.Module, weights: str) -> nn.Module:
    """``model`` (wrapped) with a fresh recipe whose base rebuilds it from its transformers config."""
    architecture, kwargs = hf.config_dict(model)
    set_recipe(model, Recipe(base=BaseModel(source="hf", name=architecture, kwargs=kwargs, weights=weights)))
    return model


def _original(base: BaseModel) -> nn.Module | None:
    for prefix, local in ((HF_PREFIX, False), (_HF_DIR, True)):
        if base.weights.startswith(prefix):
            return _create(base.weights.removeprefix(prefix), local=local, pretrained=True, checkpoint=None)
    return None


def _is_pretrained_directory(path: Path) -> bool:
    """A ``save_pretrained`` directory: a transformers config, and no vitprune recipe."""
    return (path / "config.json").is_file() and not (saved_model_dir(path) / RECIPE_FILE).is_file()


def _from_name(name: str, pretrained: bool, checkpoint: Checkpoint, kwargs: dict[str, Any]) -> nn.Module:
    return _create(name.removeprefix(HF_PREFIX), local=False, pretrained=pretrained, checkpoint=checkpoint)


FAMILY = register_family(ModelFamily(
    source="hf", build=lambda base: hf.from_config(base.name, **base.kwargs),
    claims=lambda name: name.startswith(HF_PREFIX), create=_from_name, original=_original,
    claims_directory=_is_pretrained_directory,
    open_directory=lambda path, pretrained, checkpoint: _create(str(path.resolve()), local=True,
                                                                pretrained=pretrained, checkpoint=checkpoint),
    described_as="a Hugging Face model (a save_pretrained directory, or hf:owner/name)"))

__all__ = ["FAMILY", "HF_PREFIX", "from_transformers"]
