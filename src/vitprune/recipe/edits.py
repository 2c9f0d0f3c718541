"""Registry of structural edits.

Every structural change vitprune makes goes through :func:`apply_edit`, which performs it and
records it in the model's recipe, so the recipe can never disagree with the structure. Loading a
saved model replays the same functions on a freshly built base (whose weights are then replaced
by the saved ones), so one code path both performs and rebuilds an edit.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from importlib import metadata
from typing import Any

from torch import nn

from vitprune.errors import RecipeError
from vitprune.recipe.recipe import Edit, require_recipe

EditFn = Callable[..., None]

#: Entry-point group of edits that live outside :mod:`vitprune.surgery` (a method's own, as ToMe's
#: ``merge_tokens``): ``op = "module:function"``, so a recipe naming one replays in a process that never imported it.
ENTRY_POINT_GROUP = "vitprune.edits"

_EDITS: dict[str, EditFn] = {}


def register_edit(op: str) -> Callable[[EditFn], EditFn]:
    """Register ``fn(model, **args)`` as the edit named ``op``.

    The decorated function, when called, goes through :func:`apply_edit`, so a direct call is
    recorded in the recipe too.
    """

    def decorator(fn: EditFn) -> EditFn:
        if op in _EDITS:
            raise ValueError(f"edit {op!r} registered twice")
        _EDITS[op] = fn
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def recorded(model: nn.Module, *args: Any, **kwargs: Any) -> None:
            bound = signature.bind(model, *args, **kwargs)
            bound.apply_defaults()
            params = dict(bound.arguments)
            params.pop(next(iter(signature.parameters)))
            apply_edit(model, op, **params)

        return recorded

    return decorator


def registered_edits() -> list[str]:
    """Names of all registered edits: those imported so far and those the installed packages declare."""
    return sorted({*_EDITS, *(entry.name for entry in metadata.entry_points(group=ENTRY_POINT_GROUP))})


def _lookup(op: str) -> EditFn:
    if op not in _EDITS:
        # An edit a method keeps in its own folder registers when its module is imported; the entry point names it.
        for entry in metadata.entry_points(group=ENTRY_POINT_GROUP, name=op):
            entry.load()
    try:
        return _EDITS[op]
    except KeyError:
        raise RecipeError(f"unknown edit {op!r} in recipe (known: {', '.join(registered_edits())})") from None


def apply_edit(model: nn.Module, op: str, **args: Any) -> None:
    """Perform edit ``op`` on ``model`` and append it to the model's recipe."""
    recipe = require_recipe(model)
    # Round-trip through JSON now, so an argument that would not survive saving fails at the edit, not at load.
    args = json.loads(json.dumps(args))
    _lookup(op)(model, **args)
    recipe.edits.append(Edit(op=op, args=args))


def replay(model: nn.Module, edits: list[Edit]) -> None:
    """Re-apply recorded edits to a freshly built base model (used when loading)."""
    for edit in edits:
        fn = _lookup(edit.op)
        try:
            fn(model, **edit.args)
        except (TypeError, ValueError, IndexError) as exc:
            raise RecipeError(f"recipe edit {edit.op}({edit.args}) does not apply to the base model: {exc}") from None
