"""vitprune's own models in the factory: the embedded digits and cluttered-MNIST ViTs (trained offline and cached)
and LV-ViT (its model: :mod:`vitprune.adapters.lvvit`)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from torch import nn

from vitprune.adapters.lvvit import LVVIT_CONFIGS, build_lvvit
from vitprune.errors import RecipeError, VitpruneError
from vitprune.models.cluttered_mnist import build_cluttered_mnist_vit
from vitprune.models.digits import build_digits_vit
from vitprune.models.family import Checkpoint, ModelFamily, register_family, with_recipe
from vitprune.models.zoo import TRAINED_MODELS
from vitprune.recipe import BaseModel

#: Models vitprune defines itself, by the name a command takes (``source="vitprune"`` in recipes).
VITPRUNE_MODELS: dict[str, Callable[..., nn.Module]] = {
    "digits-vit": build_digits_vit,
    "cluttered-mnist-vit": build_cluttered_mnist_vit,
    **{name: partial(build_lvvit, name) for name in LVVIT_CONFIGS},
    # The class head alone, as STAR's code runs LV-ViT (and its LRP prior needs).
    **{f"{name}-cls": partial(build_lvvit, name, aux_head=False) for name in LVVIT_CONFIGS},
}


def _build(base: BaseModel) -> nn.Module:
    if base.name not in VITPRUNE_MODELS:
        raise RecipeError(f"recipe names vitprune model {base.name!r}, which this vitprune lacks")
    return VITPRUNE_MODELS[base.name](**base.kwargs)


def _create(name: str, pretrained: bool, checkpoint: Checkpoint, kwargs: dict[str, Any]) -> nn.Module:
    if pretrained and name not in TRAINED_MODELS:
        raise VitpruneError(f"vitprune downloads no weights for {name}: pass --checkpoint with the original "
                            "checkpoint (a local file), or --no-pretrained for random init")
    if pretrained:
        if kwargs:
            raise VitpruneError(f"trained {name} exists only for its default architecture; drop {sorted(kwargs)}")
        return TRAINED_MODELS[name]()
    base = BaseModel(source="vitprune", name=name, kwargs=kwargs)
    return with_recipe(_build(base), base, checkpoint)


FAMILY = register_family(ModelFamily(
    source="vitprune", build=_build, claims=VITPRUNE_MODELS.__contains__, create=_create,
    original=lambda base: _create(base.name, True, None, {}) if base.weights == "trained" else None,
    names=VITPRUNE_MODELS.keys, described_as=f"a vitprune model ({', '.join(VITPRUNE_MODELS)})"))

__all__ = ["FAMILY", "VITPRUNE_MODELS"]
