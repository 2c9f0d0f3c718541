"""Portable saves: ``recipe.json`` + ``model.safetensors`` in one directory, no pickle.

Saves are written to a temporary sibling directory and renamed into place when complete, so an
interrupted save never leaves a half-written model under the requested name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import safetensors
import safetensors.torch
import timm
import torch
from torch import nn

from vitprune.atomic import atomic_directory, parse_json
from vitprune.errors import RecipeError, VitpruneError
from vitprune.recipe.edits import replay
from vitprune.recipe.recipe import BaseModel, Recipe, require_recipe, set_recipe
from vitprune.version import __version__

RECIPE_FILE = "recipe.json"
WEIGHTS_FILE = "model.safetensors"
#: Where every run directory (``prune ...``, ``finetune``, ``chain``) keeps its resulting model.
RUN_MODEL_DIR = "model"


def saved_model_dir(directory: str | os.PathLike) -> Path:
    """The save ``directory`` names: itself, or for a run directory the model the run saved in its ``model/``."""
    path = Path(directory)
    if not (path / RECIPE_FILE).is_file() and (path / RUN_MODEL_DIR / RECIPE_FILE).is_file():
        return path / RUN_MODEL_DIR
    return path


def save(model: nn.Module, directory: str | os.PathLike, *, metadata: dict[str, Any] | None = None) -> Path:
    """Save ``model`` (its recipe and weights) to ``directory``, replacing any previous save there.

    ``metadata`` (JSON-serialisable) is stored beside the recipe, e.g. accuracy or the run's settings.
    """
    recipe = require_recipe(model)
    target = Path(directory)
    if target.exists() and not (target / RECIPE_FILE).is_file():
        raise VitpruneError(f"refusing to overwrite {target}: it exists and is not a vitprune save")
    document = {
        **recipe.to_dict(),
        "metadata": metadata or {},
        "software": {"vitprune": __version__, "torch": torch.__version__, "timm": timm.__version__},
    }
    with atomic_directory(target) as tmp:
        (tmp / RECIPE_FILE).write_text(json.dumps(document, indent=2) + "\n")
        safetensors.torch.save_model(model, str(tmp / WEIGHTS_FILE), metadata={"format": "vitprune"})
    return target


def read_document(directory: str | os.PathLike) -> dict[str, Any]:
    """The parsed ``recipe.json`` of a save or of a run's model (recipe, metadata, software versions), validated."""
    path = saved_model_dir(directory)
    if not path.is_dir():
        raise VitpruneError(f"no saved model at {path}: directory does not exist")
    recipe_path = path / RECIPE_FILE
    if not recipe_path.is_file():
        raise RecipeError(f"{path} is not a vitprune save: {RECIPE_FILE} is missing")
    document = parse_json(recipe_path, "recipe", RecipeError)
    Recipe.from_dict(document)
    return document


#: How the base of a recipe is built, by its source (``"timm"``, ``"vitprune"``). The model factory registers
#: them, so that this layer below it need not import it.
_BASE_BUILDERS: dict[str, Callable[[BaseModel], nn.Module]] = {}


def register_base(source: str, build: Callable[[BaseModel], nn.Module]) -> None:
    """Build recipe bases whose source is ``source`` with ``build`` (randomly initialised; never downloading)."""
    _BASE_BUILDERS[source] = build


def build_base(base: BaseModel) -> nn.Module:
    """The base architecture of a recipe, randomly initialised (never downloads)."""
    if base.source not in _BASE_BUILDERS:
        raise RecipeError(f"recipe has unknown base source {base.source!r}")
    return _BASE_BUILDERS[base.source](base)


def load(directory: str | os.PathLike, *, map_location: str | torch.device = "cpu") -> nn.Module:
    """Rebuild a saved model (a save, or a run directory's model): base architecture, replayed edits, then the saved
    weights (eval mode)."""
    path = saved_model_dir(directory)
    recipe = Recipe.from_dict(read_document(path))
    model = build_base(recipe.base)
    replay(model, recipe.edits)
    set_recipe(model, recipe)
    _load_weights(model, path / WEIGHTS_FILE, map_location)
    return model.eval()


def check_weights(directory: str | os.PathLike) -> Path:
    """The weights file of a save (or of a run's model), checked to be whole without loading it: its header parses
    and its tensors cover the file exactly (a truncated or overwritten file fails). Returns its path."""
    weights = saved_model_dir(directory) / WEIGHTS_FILE
    with _readable(weights):
        with safetensors.safe_open(str(weights), framework="pt"):
            pass
    return weights


@contextmanager
def _readable(weights: Path) -> Iterator[None]:
    """Turn a missing or unreadable weights file into one :class:`RecipeError` line naming it."""
    if not weights.is_file():
        raise RecipeError(f"weights file {weights} is missing")
    try:
        yield
    except (safetensors.SafetensorError, OSError, ValueError) as exc:
        raise RecipeError(f"corrupt weights file {weights}: {exc}") from None


def _load_weights(model: nn.Module, weights: Path, map_location: str | torch.device) -> None:
    with _readable(weights):
        state = safetensors.torch.load_file(str(weights), device=str(map_location))
    check_state_dict(model, state, str(weights))
    model.load_state_dict(state, strict=False)


def check_state_dict(model: nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """Raise a one-line :class:`RecipeError` if ``state`` does not fit ``model`` exactly (keys and shapes)."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing (first: {missing[0]})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected (first: {unexpected[0]})")
        raise RecipeError(f"weights in {source} do not match the architecture: {', '.join(parts)}")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise RecipeError(
                f"weights in {source} do not match the architecture: {name} has shape "
                f"{tuple(tensor.shape)}, the model expects {tuple(expected[name].shape)}"
            )
