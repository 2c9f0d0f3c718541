"""timm's models in the factory: any name timm knows, with timm's pretrained weights or random ones (the families'
code: :mod:`vitprune.adapters`)."""

from __future__ import annotations

from typing import Any

import timm
from torch import nn

from vitprune.adapters import prepare_model
from vitprune.errors import RecipeError, VitpruneError, first_line
from vitprune.models.family import Checkpoint, ModelFamily, register_family, with_recipe
from vitprune.models.hub import settle_offline_mode
from vitprune.recipe import BaseModel


def _build(base: BaseModel) -> nn.Module:
    if not timm.is_model(base.name):
        raise RecipeError(f"recipe names timm model {base.name!r}, which this timm ({timm.__version__}) lacks")
    return prepare_model(timm.create_model(base.name, pretrained=False, **base.kwargs))


def _pretrained(name: str, kwargs: dict[str, Any]) -> nn.Module:
    offline = settle_offline_mode()
    try:
        model = timm.create_model(name, pretrained=True, **kwargs)
    except Exception as exc:  # hub, HTTP and offline errors have no common base class
        why = ("offline, and not in the local Hugging Face cache" if offline
               else f"{type(exc).__name__}: {first_line(exc)}")
        raise VitpruneError(f"could not load pretrained weights for {name} ({why}); pass --checkpoint PATH for local "
                            "weights, --no-pretrained for random init, or fetch them once online") from None
    return prepare_model(model)


def _create(name: str, pretrained: bool, checkpoint: Checkpoint, kwargs: dict[str, Any]) -> nn.Module:
    base = BaseModel(source="timm", name=name, kwargs=kwargs, weights="timm-pretrained" if pretrained else "random")
    return with_recipe(_pretrained(name, kwargs) if pretrained else _build(base), base, checkpoint)


FAMILY = register_family(ModelFamily(
    source="timm", build=_build, claims=timm.is_model, create=_create,
    original=lambda base: _create(base.name, True, None, base.kwargs) if base.weights == "timm-pretrained" else None,
    names=timm.list_models, described_as="a timm model name"))

__all__ = ["FAMILY"]
