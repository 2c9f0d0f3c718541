"""Build models from names: timm model names, vitprune's own models, local checkpoints, saved directories."""

from __future__ import annotations

import difflib
import hashlib
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import timm
import torch
from torch import nn

from vitprune.adapters import find_adapter, hf, prepare_model
from vitprune.adapters.lvvit import LVVIT_CONFIGS, build_lvvit
from vitprune.errors import RecipeError, VitpruneError, first_line
from vitprune.models.cluttered_mnist import build_cluttered_mnist_vit
from vitprune.models.digits import build_digits_vit
from vitprune.models.hub import settle_offline_mode
from vitprune.models.zoo import TRAINED_MODELS
from vitprune.recipe import (
    RECIPE_FILE, BaseModel, Recipe, build_base, check_state_dict, load, register_base, require_recipe, saved_model_dir,
    set_recipe,
)
from vitprune.surgery import depth, head, tokens, width  # noqa: F401  (register the edits recipes replay)

#: Models vitprune defines itself, by the name a command takes (``source="vitprune"`` in recipes).
VITPRUNE_MODELS: dict[str, Callable[..., nn.Module]] = {
    "digits-vit": build_digits_vit,
    "cluttered-mnist-vit": build_cluttered_mnist_vit,
    **{name: partial(build_lvvit, name) for name in LVVIT_CONFIGS},
    # The class head alone, as STAR's code runs LV-ViT (and its LRP prior needs).
    **{f"{name}-cls": partial(build_lvvit, name, aux_head=False) for name in LVVIT_CONFIGS},
}


def _build_timm(base: BaseModel) -> nn.Module:
    if not timm.is_model(base.name):
        raise RecipeError(f"recipe names timm model {base.name!r}, which this timm ({timm.__version__}) lacks")
    return prepare_model(timm.create_model(base.name, pretrained=False, **base.kwargs))


def _build_own(base: BaseModel) -> nn.Module:
    if base.name not in VITPRUNE_MODELS:
        raise RecipeError(f"recipe names vitprune model {base.name!r}, which this vitprune lacks")
    return VITPRUNE_MODELS[base.name](**base.kwargs)


def _build_hf(base: BaseModel) -> nn.Module:
    return hf.from_config(base.name, **base.kwargs)


register_base("timm", _build_timm)
register_base("vitprune", _build_own)
register_base("hf", _build_hf)

#: How a MODEL argument names a Hugging Face hub model: ``hf:owner/name``.
HF_PREFIX = "hf:"
#: The provenance a recipe records for weights from a local ``save_pretrained`` directory.
_HF_DIR = "hf-dir:"


def create_model(name: str, *, pretrained: bool = False, checkpoint: str | os.PathLike | None = None,
                 **kwargs: Any) -> nn.Module:
    """A base model with a fresh recipe, in eval mode.

    ``name`` is a timm model name, a vitprune model (``digits-vit``) or a Hugging Face hub id
    ``hf:owner/name`` (needs ``vitprune[hf]``). ``pretrained`` loads timm's or the hub's pretrained
    weights (network needed) or, for ``digits-vit`` and ``cluttered-mnist-vit``, the trained model
    from the cache (training it on first use). ``checkpoint`` loads weights from a local file instead.
    """
    if pretrained and checkpoint is not None:
        raise VitpruneError("give either pretrained weights or a checkpoint, not both")
    if name.startswith(HF_PREFIX):
        return _create_hf(name.removeprefix(HF_PREFIX), local=False, pretrained=pretrained, checkpoint=checkpoint)
    if name in VITPRUNE_MODELS:
        if pretrained and name not in TRAINED_MODELS:
            raise VitpruneError(f"vitprune downloads no weights for {name}: pass --checkpoint with the original "
                                "checkpoint (a local file), or --no-pretrained for random init")
        if pretrained:
            if kwargs:
                raise VitpruneError(f"trained {name} exists only for its default architecture; drop {sorted(kwargs)}")

            return TRAINED_MODELS[name]()
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


def resolve_model(spec: str, *, pretrained: bool = True, checkpoint: str | os.PathLike | None = None,
                  seed: int = 0) -> nn.Module:
    """What a command's MODEL argument names: a saved directory, a Hugging Face ``save_pretrained`` directory or hub
    id (``hf:owner/name``), ``digits-vit``, or a timm model name. Random weights (``pretrained`` off) are drawn
    under ``seed``, so that the same command builds the same model every time; torch's global generator is left as
    it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _resolve(spec, pretrained=pretrained, checkpoint=checkpoint)


def _resolve(spec: str, *, pretrained: bool, checkpoint: str | os.PathLike | None) -> nn.Module:
    path = Path(spec)
    if path.is_dir() and (path / "config.json").is_file() and not (saved_model_dir(path) / RECIPE_FILE).is_file():
        return _create_hf(str(path.resolve()), local=True, pretrained=pretrained, checkpoint=checkpoint)
    if path.is_dir():
        if checkpoint is not None:
            raise VitpruneError(f"{spec} is a saved model with its own weights; --checkpoint does not apply")
        return load(path)
    if spec.startswith(HF_PREFIX):
        return create_model(spec, pretrained=pretrained, checkpoint=checkpoint)
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
    if base.weights.startswith(HF_PREFIX):
        return _create_hf(base.weights.removeprefix(HF_PREFIX), local=False, pretrained=True, checkpoint=None)
    if base.weights.startswith(_HF_DIR):
        return _create_hf(base.weights.removeprefix(_HF_DIR), local=True, pretrained=True, checkpoint=None)
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
        raise VitpruneError(f"cannot read checkpoint {path}: {type(exc).__name__}: {first_line(exc)}") from None
    adapter = find_adapter(model)
    if adapter is not None:  # a family whose original layout differs from its modules' (LV-ViT, ConvNeXt's conv MLP)
        state = adapter.checkpoint_state(state)
    check_state_dict(model, state, str(path))
    model.load_state_dict(state)
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def from_transformers(model: nn.Module) -> nn.Module:
    """A transformers ViT or DeiT classifier already in memory, as a vitprune model: wrapped so that it returns
    logits, with a fresh recipe (its weights are the user's), so that it can be pruned and saved."""
    return _track_hf(hf.HFImageClassifier(model), "user").train(model.training)


def _create_hf(source: str, *, local: bool, pretrained: bool, checkpoint: str | os.PathLike | None) -> nn.Module:
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
    return _track_hf(model, (_HF_DIR if local else HF_PREFIX) + source if pretrained else "random").eval()


def _track_hf(model: nn.Module, weights: str) -> nn.Module:
    """``model`` (wrapped) with a fresh recipe whose base rebuilds it from its transformers config."""
    architecture, kwargs = hf.config_dict(model)
    set_recipe(model, Recipe(base=BaseModel(source="hf", name=architecture, kwargs=kwargs, weights=weights)))
    return model


def _create_timm(name: str, pretrained: bool, kwargs: dict[str, Any]) -> nn.Module:
    offline = pretrained and settle_offline_mode()
    try:
        model = timm.create_model(name, pretrained=pretrained, **kwargs)
    except Exception as exc:  # hub, HTTP and offline errors have no common base class
        why = ("offline, and not in the local Hugging Face cache" if offline
               else f"{type(exc).__name__}: {first_line(exc)}")
        raise VitpruneError(f"could not load pretrained weights for {name} ({why}); pass --checkpoint PATH for local "
                            "weights, --no-pretrained for random init, or fetch them once online") from None
    return prepare_model(model)



def _unknown_model_message(name: str) -> str:
    close = difflib.get_close_matches(name, [*VITPRUNE_MODELS, *timm.list_models()], n=3, cutoff=0.6)
    hint = f" (did you mean: {', '.join(close)}?)" if close else ""
    return f"unknown model {name!r}: not a timm model name, a vitprune model ({', '.join(VITPRUNE_MODELS)}), " \
           f"a saved model directory or a Hugging Face model (a save_pretrained directory, or hf:owner/name){hint}"
