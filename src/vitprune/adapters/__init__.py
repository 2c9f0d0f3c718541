"""Model adapters: what a ViT is, independent of the library that defined it."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from vitprune.adapters.base import CAPABILITIES, QKV, AttentionView, BlockView, MlpView, TokenHead, ViTAdapter
from vitprune.adapters.hf import HFImageClassifier, HFViTAdapter
from vitprune.adapters.lvvit import LVViTAdapter
from vitprune.adapters.timm_convnext import ConvNeXtAdapter
from vitprune.adapters.timm_swin import SwinAdapter
from vitprune.adapters.timm_vit import TimmViTAdapter
from vitprune.errors import UnsupportedArchitectureError

#: Adapter classes tried in order by :func:`get_adapter`; a new family registers here (a subclass of another
#: family's model before that family).
ADAPTERS: list[type[ViTAdapter]] = [LVViTAdapter, TimmViTAdapter, HFViTAdapter, ConvNeXtAdapter, SwinAdapter]


#: The attribute of a model that holds its adapter: one per model, built (and the model checked) once.
_ADAPTER_ATTRIBUTE = "_vitprune_adapter"


def find_adapter(model: nn.Module) -> ViTAdapter | None:
    """The adapter for ``model``, or ``None`` where no family matches (a module that is not a ViT).

    The adapter is kept on the model (a plain attribute, as the recipe is, so a deep copy gets its own adapter of
    the copy): every edit goes through it, so the model stays in a form it reads, and later calls skip the checks
    the first one made."""
    cached = model.__dict__.get(_ADAPTER_ATTRIBUTE)
    if cached is not None and cached.model is model:
        return cached
    for cls in ADAPTERS:
        if cls.matches(model):
            adapter = cls(model)
            object.__setattr__(model, _ADAPTER_ATTRIBUTE, adapter)
            return adapter
    return None


def prepare_model(model: nn.Module) -> nn.Module:
    """``model`` in the form its family's adapter edits (:meth:`ViTAdapter.prepare`, in place; the function is
    unchanged); a module of no supported family is returned as it is."""
    for cls in ADAPTERS:
        if cls.matches(model):
            cls.prepare(model)
            break
    return model


def get_adapter(model: nn.Module, *, needs: Sequence[str] = (), by: str = "") -> ViTAdapter:
    """The adapter for ``model``; raises :class:`UnsupportedArchitectureError` if no family matches, or if the family
    lacks a capability ``by`` (an edit, a method) ``needs`` (:meth:`ViTAdapter.require`)."""
    adapter = find_adapter(model)
    if adapter is not None:
        if needs:
            adapter.require(*needs, by=by)
        return adapter
    families = ", ".join(cls.family for cls in ADAPTERS)
    raise UnsupportedArchitectureError(
        f"unsupported architecture: {type(model).__name__} is not a supported vision transformer "
        f"(supported: {families})"
    )


__all__ = [
    "ADAPTERS", "CAPABILITIES", "QKV", "AttentionView", "BlockView", "ConvNeXtAdapter", "HFImageClassifier",
    "HFViTAdapter", "LVViTAdapter", "MlpView", "SwinAdapter", "TokenHead",
    "TimmViTAdapter", "ViTAdapter", "find_adapter", "get_adapter", "prepare_model",
]
