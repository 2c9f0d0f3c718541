"""Build models from names: timm model names, vitprune's own models, local checkpoints, saved directories."""

from __future__ import annotations

import difflib
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import timm
from torch import nn

from vitprune.errors import RecipeError, VitpruneError
from vitprune.models.digits import build_digits_vit
from vitprune.recipe import (
    BaseModel, Recipe, build_base, check_state_dict, load, register_base, require_recipe, set_recipe,
)

#: Models vitprune defines itself, by the name a command takes (``source="vitprune"`` in recipes).
VITPRUNE_MODELS: dict[str, Callable[..., nn.Module]] = {"digits-vit": build_digits_vit}


def _build_timm(base: BaseModel) -> nn.Module:
    if not timm.is_model(base.name):
        raise RecipeError(f"recipe names timm model {base.name!r}, which this timm ({timm.__version__}) lacks")
    return timm.create_model(base.name, pretrained=False, **base.kwargs)


def _build_own(base: BaseModel) -> nn.Module:
    if base.name not in VITPRUNE_MODELS:
        raise RecipeError(f"recipe names vitprune model {base.name!r}, which this vitprune lacks")
    return VITPRUNE_MODELS[base.name](**base.kwargs)


register_base("timm", _build_timm)
register_base("vitprune", _build_own)


def create_model(name: str, *, pretrained: bool = False, checkpoint: str | os.PathLike | None = None,
                 **kwargs: Any) -> nn.Module:
    """A base model with a fresh recipe, in eval mode.

    ``name`` is a timm model name or a vitprune model (``digits-vit``). ``pretrained`` loads timm's
    pretrained weights (network needed) or, for ``digits-vit``, the trained model from the cache
    (training it on first use). ``checkpoint`` loads weights from a local file instead.
    """
    if pretrained and checkpoint is not None:
        raise VitpruneError("give either pretrained weights or a checkpoint, not both")
    if name in VITPRUNE_MODELS:
        if pretrained:
            from vitprune.models.zoo import trained_digits_vit  # the zoo saves with this module's recipes

            if kwargs:
                raise VitpruneError(f"trained {name} exists only for its default architecture; drop {sorted(kwargs)}")

            return trained_digits_vit()
        base = BaseModel(source="vitprune", name=name, kwargs=kwargs)
        model = build_base(base)
    elif timm.is_model(name):
        base = BaseModel(source="timm", name=name, kwargs=kwargs, weights="timm-pretrained" if pretrained else "random")
        model = _create_timm(name, pretrained, kwargs) if pretrained else build_base(base)
    else:
        raise VitpruneError(_unknown_model_message(name))
    if checkpoint is not None:
        base.weights, base.sha256 = f"checkpoint:{checkpoint}", load_checkpoint(model, checkpoint)
    set_recipe(model, Recipe(base=base))
    return model.eval()


def resolve_model(spec: str, *, pretrained: bool = True, checkpoint: str | os.PathLike | None = None) -> nn.Module:
    """What a command's MODEL argument names: a saved directory, ``digits-vit``, or a timm model name."""
    path = Path(spec)
    if path.is_dir():
        if checkpoint is not None:
            raise VitpruneError(f"{spec} is a saved model with its own weights; --checkpoint does not apply")
        return load(path)
    if os.sep in spec or path.suffix in {".pth", ".pt", ".safetensors", ".bin"}:
        raise VitpruneError(f"model path {spec} does not exist")
    return create_model(spec, pretrained=pretrained and checkpoint is None, checkpoint=checkpoint)


def original_model(model: nn.Module) -> nn.Module:
    """The unedited model ``model`` started from: its recipe's base architecture with the base's own weights.

    This is the default teacher for self-distillation. A base with random weights has no meaningful
    original, which is a user error.
    """
    base = require_recipe(model).base
    if base.weights == "random":
        raise VitpruneError(f"the base model {base.name} has random weights, so there is no original to distil from; "
                            "pass --teacher MODEL")
    if base.weights == "trained" and base.source == "vitprune":
        return create_model(base.name, pretrained=True)
    if base.weights == "timm-pretrained":
        return create_model(base.name, pretrained=True, **base.kwargs)
    if base.weights.startswith("checkpoint:"):
        return create_model(base.name, checkpoint=base.weights.removeprefix("checkpoint:"), **base.kwargs)
    raise VitpruneError(f"cannot rebuild the original of {base.name} (weights: {base.weights}); pass --teacher MODEL")


def load_checkpoint(model: nn.Module, checkpoint: str | os.PathLike) -> str:
    """Load a local state-dict file (.safetensors, or a torch file read with ``weights_only``); returns its sha256."""
    path = Path(checkpoint)
    if not path.is_file():
        raise VitpruneError(f"checkpoint {path} does not exist")
    try:
        state = timm.models.load_state_dict(str(path), weights_only=True)
    except Exception as exc:  # torch/safetensors raise many types for a damaged or non-weights file
        raise VitpruneError(f"cannot read checkpoint {path}: {type(exc).__name__}: {_first_line(exc)}") from None
    check_state_dict(model, state, str(path))
    model.load_state_dict(state)
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _create_timm(name: str, pretrained: bool, kwargs: dict[str, Any]) -> nn.Module:
    try:
        return timm.create_model(name, pretrained=pretrained, **kwargs)
    except Exception as exc:  # hub, HTTP and offline errors have no common base class
        raise VitpruneError(
            f"could not load pretrained weights for {name} ({type(exc).__name__}: {_first_line(exc)}); "
            "without network, pass --checkpoint PATH for local weights or --no-pretrained for random init"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


def _unknown_model_message(name: str) -> str:
    close = difflib.get_close_matches(name, [*VITPRUNE_MODELS, *timm.list_models()], n=3, cutoff=0.6)
    hint = f" (did you mean: {', '.join(close)}?)" if close else ""
    return f"unknown model {name!r}: not a timm model name, a vitprune model ({', '.join(VITPRUNE_MODELS)}), " \
           f"or a saved model directory{hint}"
