"""Build models from names: timm model names, vitprune's own models, Hugging Face models, local checkpoints and saved
directories, through the families registered in :mod:`vitprune.models.family` (each family's entry in its own
module: :mod:`~vitprune.models.hf`, :mod:`~vitprune.models.own`, :mod:`~vitprune.models.timm_models`)."""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

# The families register themselves when imported, in the order a name is tried: a hub id's prefix first, then
# vitprune's own names, then timm's.
from vitprune.models import hf, own, timm_models  # noqa: F401
from vitprune.errors import VitpruneError
from vitprune.models.family import ModelFamily, families
from vitprune.recipe import load, require_recipe
from vitprune.surgery import depth, head, tokens, width  # noqa: F401  (register the edits recipes replay)


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
    for family in families():
        if family.claims(name):
            return family.create(name, pretrained, checkpoint, kwargs)
    raise VitpruneError(_unknown_model_message(name))


def resolve_model(spec: str, *, pretrained: bool = True, checkpoint: str | os.PathLike | None = None,
                  seed: int = 0) -> nn.Module:
    """What a command's MODEL argument names: a saved directory, a directory in a family's own format (a Hugging
    Face ``save_pretrained`` one), or a name :func:`create_model` takes. Random weights (``pretrained`` off) are
    drawn under ``seed``, so that the same command builds the same model every time; torch's global generator is
    left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _resolve(spec, pretrained=pretrained, checkpoint=checkpoint)


def _resolve(spec: str, *, pretrained: bool, checkpoint: str | os.PathLike | None) -> nn.Module:
    path = Path(spec)
    if path.is_dir():
        for family in families():
            if family.claims_directory(path):
                return family.open_directory(path, pretrained, checkpoint)
        if checkpoint is not None:
            raise VitpruneError(f"{spec} is a saved model with its own weights; --checkpoint does not apply")
        return load(path)
    if (os.sep in spec or path.suffix in {".pth", ".pt", ".safetensors", ".bin"}) and not any(
            family.claims(spec) for family in families()):
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
    if base.weights.startswith("checkpoint:"):
        return create_model(base.name, checkpoint=base.weights.removeprefix("checkpoint:"), **base.kwargs)
    family = _family(base.source)
    original = family.original(base) if family is not None else None
    if original is None:
        raise VitpruneError(f"cannot rebuild the original of {base.name} (weights: {base.weights}); pass --teacher "
                            "MODEL")
    return original


def _family(source: str) -> ModelFamily | None:
    return next((family for family in families() if family.source == source), None)


def _unknown_model_message(name: str) -> str:
    known = [known for family in families() for known in family.names()]
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f" (did you mean: {', '.join(close)}?)" if close else ""
    kinds = ", ".join(family.described_as for family in families() if family.described_as)
    return f"unknown model {name!r}: not {kinds} or a saved model directory{hint}"


__all__ = ["create_model", "original_model", "resolve_model"]
