"""A new classifier head, for data with other classes than the model was trained on.

The new head starts at zero, as the ViT paper fine-tunes ("we remove the pre-trained prediction head and attach a
zero-initialized D × K feedforward layer"): no random draw, so a run repeats. The edit records the class names it
was made for, and :func:`recorded_classes` reads them back, so that later data is labelled as the head was trained.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.errors import VitpruneError
from vitprune.recipe import get_recipe
from vitprune.recipe.edits import register_edit

_OP = "replace_head"


@register_edit(_OP)
def replace_head(model: nn.Module, num_classes: int, classes: Sequence[str] | None = None) -> None:
    """Replace every classifier head of ``model`` (a distilled model's second head and LV-ViT's token-labelling
    head too) by a zero one for ``num_classes`` classes, named ``classes`` in label order if given."""
    if num_classes < 1:
        raise VitpruneError(f"a classifier head needs at least 1 class, got {num_classes}")
    if classes is not None and len(classes) != num_classes:
        raise VitpruneError(f"{len(classes)} class names for a head of {num_classes} classes")
    adapter = get_adapter(model)
    reference = next(model.parameters())
    adapter.set_num_classes(num_classes)
    with torch.no_grad():
        for head in adapter.classifier_heads():
            head.to(reference).train(model.training)
            head.weight.zero_()
            head.bias.zero_()


def recorded_classes(model: nn.Module) -> list[str] | None:
    """The class names of ``model``'s head as :func:`replace_head` last recorded them; ``None`` when the head is the
    base model's own or was given no names."""
    recipe = get_recipe(model)
    edits = [edit for edit in recipe.edits if edit.op == _OP] if recipe is not None else []
    return edits[-1].args["classes"] if edits else None
