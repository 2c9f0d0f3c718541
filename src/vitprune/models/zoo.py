"""Trained models vitprune makes itself and caches on disk (no downloads)."""

from __future__ import annotations

from rich.console import Console
from torch import nn

from vitprune.cache import cache_dir
from vitprune.errors import RecipeError
from vitprune.recipe import BaseModel, Recipe, load, save, set_recipe

#: Bump when the digits model's architecture or training recipe changes, so stale caches are not reused.
DIGITS_VIT_CACHE_NAME = "digits-vit-v2"


def trained_digits_vit(*, progress: bool = True) -> nn.Module:
    """The embedded default model, trained on the digits dataset once and then loaded from the cache."""
    from vitprune.models.digits import train_digits_vit  # training pulls in data and the engine

    path = cache_dir() / DIGITS_VIT_CACHE_NAME
    console = Console(stderr=True, quiet=not progress)
    if path.exists():
        try:
            return load(path)
        except RecipeError as exc:
            console.print(f"[yellow]cached digits model unusable ({exc}); training it again[/]")
    console.print(f"training the digits ViT once; it will be cached in {path}")
    model, metrics = train_digits_vit(progress=progress)
    set_recipe(model, Recipe(base=BaseModel(source="vitprune", name="digits-vit", weights="trained")))
    save(model, path, metadata={"trained_on": "digits", **metrics})
    return model.eval()

