"""The model families the factory reaches, each registered by its own module in ``models/``: how a MODEL name, a
directory in the family's own format and a recipe's base become a model. The factory dispatches through them and
names no family."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import timm
from torch import nn

from vitprune.adapters import find_adapter
from vitprune.errors import VitpruneError, first_line
from vitprune.recipe import BaseModel, Recipe, check_state_dict, register_base, set_recipe

#: The checkpoint a user's MODEL takes its weights from: a local file, or ``None``.
Checkpoint = str | os.PathLike | None


@dataclass(frozen=True)
class ModelFamily:
    """How the factory reaches one family's models."""

    #: The family's name, as recipes record it (:attr:`~vitprune.recipe.BaseModel.source`).
    source: str
    #: A recipe base's architecture with random weights (recipes rebuild through it).
    build: Callable[[BaseModel], nn.Module]
    #: Whether a MODEL name is the family's.
    claims: Callable[[str], bool]
    #: The model a claimed name gives, with a fresh recipe: ``create(name, pretrained, checkpoint, kwargs)``.
    create: Callable[[str, bool, Checkpoint, dict[str, Any]], nn.Module]
    #: The model with the weights a recipe's base records, or ``None`` for weights the family does not know.
    original: Callable[[BaseModel], nn.Module | None] = lambda base: None
    #: Whether a directory is a model in the family's own format (not a vitprune save) ...
    claims_directory: Callable[[Path], bool] = lambda path: False
    #: ... and the model it holds: ``open_directory(path, pretrained, checkpoint)``.
    open_directory: Callable[[Path, bool, Checkpoint], nn.Module] | None = None
    #: The family's model names, for the suggestions of an unknown name.
    names: Callable[[], Iterable[str]] = lambda: ()
    #: How the unknown-model message names what the family takes.
    described_as: str = ""


_FAMILIES: list[ModelFamily] = []


def register_family(family: ModelFamily) -> ModelFamily:
    """Add ``family`` to those the factory asks, in order (and its builder to the recipes' bases)."""
    _FAMILIES.append(family)
    register_base(family.source, family.build)
    return family


def families() -> list[ModelFamily]:
    """The registered families, in the order the factory asks them."""
    return list(_FAMILIES)


def with_recipe(model: nn.Module, base: BaseModel, checkpoint: Checkpoint) -> nn.Module:
    """``model`` with a fresh recipe of ``base``, in eval mode; with ``checkpoint``, its weights loaded from that file
    (which the recipe records, with its hash)."""
    if checkpoint is not None:
        base.weights, base.sha256 = f"checkpoint:{checkpoint}", load_checkpoint(model, checkpoint)
    set_recipe(model, Recipe(base=base))
    return model.eval()


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


__all__ = ["Checkpoint", "ModelFamily", "families", "load_checkpoint", "register_family", "with_recipe"]
