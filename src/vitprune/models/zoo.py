"""Trained models vitprune makes itself and caches on disk (no downloads)."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from torch import nn

from vitprune.cache import cache_dir
from vitprune.errors import RecipeError
from vitprune.recipe import BaseModel, Recipe, load, save, set_recipe

#: Bump when the digits model's architecture or training recipe changes, so stale caches are not reused.
DIGITS_VIT_CACHE_NAME = "digits-vit-v2"
#: Bump when the cluttered-MNIST model's or data's construction or training recipe changes.
CLUTTERED_MNIST_VIT_CACHE_NAME = "cluttered-mnist-vit-v3"


def trained_digits_vit(*, progress: bool = True) -> nn.Module:
    """The embedded default model, trained on the digits dataset once and then loaded from the cache."""
    from vitprune.models.digits import train_digits_vit  # training pulls in data and the engine

    return _trained("digits-vit", "digits ViT", DIGITS_VIT_CACHE_NAME, "digits", train_digits_vit, progress)


def trained_cluttered_mnist_vit(*, seed: int = 0, progress: bool = True) -> nn.Module:
    """The cluttered-MNIST model (needs ``vitprune[bench]``), trained once and then loaded from the cache.

    ``seed`` trains another checkpoint of the same recipe (initialisation, image order and augmentation), cached
    beside the default one: claims that depend on the starting model are judged over several.
    """
    from vitprune.models.cluttered_mnist import train_cluttered_mnist_vit

    name = CLUTTERED_MNIST_VIT_CACHE_NAME + (f"-seed{seed}" if seed else "")
    return _trained("cluttered-mnist-vit", f"cluttered-MNIST ViT (seed {seed})" if seed else "cluttered-MNIST ViT",
                    name, "cluttered-mnist", lambda progress: train_cluttered_mnist_vit(seed=seed, progress=progress),
                    progress)


#: The vitprune models whose weights vitprune trains itself, by name.
TRAINED_MODELS: dict[str, Callable[..., nn.Module]] = {
    "digits-vit": trained_digits_vit,
    "cluttered-mnist-vit": trained_cluttered_mnist_vit,
}


def _trained(name: str, label: str, cache_name: str, data: str, train: Callable[..., tuple[nn.Module, dict]],
             progress: bool) -> nn.Module:
    """Model ``name`` (``label`` in messages) from the cache, or trained on ``data`` by ``train`` and cached under
    ``cache_name``."""
    path = cache_dir() / cache_name
    console = Console(stderr=True, quiet=not progress)
    if path.exists():
        try:
            return load(path)
        except RecipeError as exc:
            console.print(f"[yellow]cached {label} unusable ({exc}); training it again[/]")
    console.print(f"training the {label} once; it will be cached in {path}")
    model, metrics = train(progress=progress)
    set_recipe(model, Recipe(base=BaseModel(source="vitprune", name=name, weights="trained")))
    save(model, path, metadata={"trained_on": data, **metrics})
    return model.eval()
