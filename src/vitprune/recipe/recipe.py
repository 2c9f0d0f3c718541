"""The recipe: a base-model reference plus the ordered structural edits applied to it.

A recipe travels with the model object (see :func:`get_recipe`) and is saved as versioned JSON
beside the weights. Rebuilding a pruned model = build the base architecture, replay the edits,
load the weights. Methods compose by appending edits.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from torch import nn

from vitprune.errors import RecipeError, VitpruneError

RECIPE_FORMAT = "vitprune-recipe"
RECIPE_VERSION = 1

_ATTR = "_vitprune_recipe"


@dataclass
class BaseModel:
    """How to build the unedited architecture, and where its weights came from.

    ``source`` is ``"timm"`` (``name`` is a timm model name) or ``"vitprune"`` (a model vitprune
    defines, such as ``digits-vit``). ``kwargs`` are the constructor keyword arguments.
    ``weights`` records provenance only (``"random"``, ``"timm-pretrained"``, ``"checkpoint:PATH"``,
    ``"trained"``): a saved model always carries its own weights.
    """

    source: str
    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    weights: str = "random"
    sha256: str | None = None


@dataclass
class Edit:
    """One structural edit: a registered operation name and its JSON-serialisable arguments."""

    op: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class Recipe:
    """Base model plus ordered edits; the architecture of a (possibly pruned) model."""

    base: BaseModel
    edits: list[Edit] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict tagged with the format name and version."""
        return {"format": RECIPE_FORMAT, "version": RECIPE_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recipe:
        """Parse a dict written by :meth:`to_dict`; rejects other formats and versions."""
        if not isinstance(data, dict) or data.get("format") != RECIPE_FORMAT:
            raise RecipeError("not a vitprune recipe (missing or wrong 'format' field)")
        version = data.get("version")
        if version != RECIPE_VERSION:
            raise RecipeError(f"unsupported recipe version {version!r} (this vitprune reads version {RECIPE_VERSION})")
        try:
            base = BaseModel(**data["base"])
            edits = [Edit(op=e["op"], args=dict(e.get("args", {}))) for e in data.get("edits", [])]
        except (KeyError, TypeError) as exc:
            raise RecipeError(f"malformed recipe: {exc}") from None
        return cls(base=base, edits=edits)

    def to_json(self) -> str:
        """Indented JSON text."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"


def get_recipe(model: nn.Module) -> Recipe | None:
    """The recipe attached to ``model``, or ``None`` for a model vitprune did not create or track."""
    return getattr(model, _ATTR, None)


def require_recipe(model: nn.Module) -> Recipe:
    """The recipe attached to ``model``; a clear error if there is none."""
    recipe = get_recipe(model)
    if recipe is None:
        raise VitpruneError(
            "this model has no vitprune recipe: create it with vitprune.create_model(...) "
            "or register it with vitprune.track(model, name, **kwargs)"
        )
    return recipe


def set_recipe(model: nn.Module, recipe: Recipe) -> None:
    """Attach ``recipe`` to ``model`` (a plain attribute, so it follows ``copy.deepcopy``)."""
    object.__setattr__(model, _ATTR, recipe)


def track(model: nn.Module, name: str, *, source: str = "timm", weights: str = "user", **kwargs: Any) -> nn.Module:
    """Attach a fresh recipe to a model the user built, so it can be pruned and saved.

    ``name`` and ``kwargs`` must rebuild the same architecture, e.g. ``track(m, "deit_small_patch16_224")``
    for ``m = timm.create_model("deit_small_patch16_224")``.
    """
    set_recipe(model, Recipe(base=BaseModel(source=source, name=name, kwargs=copy.deepcopy(kwargs), weights=weights)))
    return model
