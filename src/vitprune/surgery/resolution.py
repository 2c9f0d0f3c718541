"""Another input size: what a backbone needs when a detection or segmentation head takes it to larger images, as the
papers' COCO and ADE20K fine-tunes do (a ViT's position embedding resampled to the new patch grid).

The edit is recorded, so a saved model reloads at the size it was resized to.
"""

from __future__ import annotations

from torch import nn

from vitprune.adapters import get_adapter
from vitprune.errors import VitpruneError
from vitprune.recipe.edits import register_edit


@register_edit("set_input_size")
def set_input_size(model: nn.Module, height: int, width: int) -> None:
    """Make ``model`` take ``height`` x ``width`` images (a ViT: its position embedding resampled, bicubic, as timm
    does when a checkpoint is loaded at another size). Structure and every other weight stay as they are."""
    if height < 1 or width < 1:
        raise VitpruneError(f"an input size must be positive, got {height}x{width}")
    adapter = get_adapter(model, needs=("input_resize",), by="resizing the input")
    try:
        adapter.set_input_size(height, width)
    except ValueError as exc:
        raise VitpruneError(str(exc)) from None
