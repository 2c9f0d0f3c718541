"""Model adapters: what a ViT is, independent of the library that defined it."""

from __future__ import annotations

from torch import nn

from vitprune.adapters.base import AttentionView, BlockView, MlpView, ViTAdapter
from vitprune.adapters.timm_vit import TimmViTAdapter
from vitprune.errors import UnsupportedArchitectureError

#: Adapter classes tried in order by :func:`get_adapter`; a new family registers here.
ADAPTERS: list[type[ViTAdapter]] = [TimmViTAdapter]


def get_adapter(model: nn.Module) -> ViTAdapter:
    """The adapter for ``model``; raises :class:`UnsupportedArchitectureError` if no family matches."""
    for cls in ADAPTERS:
        if cls.matches(model):
            return cls(model)
    families = ", ".join(cls.family for cls in ADAPTERS)
    raise UnsupportedArchitectureError(
        f"unsupported architecture: {type(model).__name__} is not a supported vision transformer (supported: {families})"
    )


__all__ = ["ADAPTERS", "AttentionView", "BlockView", "MlpView", "TimmViTAdapter", "ViTAdapter", "get_adapter"]
