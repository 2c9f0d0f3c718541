"""LV-ViT's adapter: timm's ViT adapter, which every edit goes through, with what LV-ViT's model adds."""

from __future__ import annotations

import torch
from torch import nn

from vitprune.adapters.base import TokenHead
from vitprune.adapters.lvvit.model import LVViT
from vitprune.adapters.timm_vit import TimmViTAdapter


class LVViTAdapter(TimmViTAdapter):
    """LV-ViT: timm's ViT adapter, with the convolutional stem's input and the token-labelling head (a
    :class:`~vitprune.adapters.base.TokenHead`: its maximum over the patch tokens, halved, adds to the class head's
    logits, and relevance follows both paths)."""

    family = "lvvit"
    family_modules = ("vitprune.adapters.lvvit",)
    family_attributes = frozenset({"aux_head", "aux_weight", "skip_lam", "checkpoint_filter"})

    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        return isinstance(model, LVViT)

    def checkpoint_state(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return self.model.checkpoint_filter(state)

    @property
    def input_size(self) -> tuple[int, int, int]:
        pe = self.model.patch_embed
        return (pe.conv1.in_channels, *pe.img_size)

    @property
    def token_head(self) -> TokenHead | None:
        aux = self.model.aux_head
        return None if aux is None else TokenHead(aux, self.model.aux_weight)

    def patch_features(self, x: torch.Tensor) -> torch.Tensor:
        if self.model.aux_head is None:
            return super().patch_features(x)
        return self.model.norm(x)[:, self.num_prefix_tokens:]

    def classifier_heads(self) -> list[nn.Module]:
        return super().classifier_heads() + ([self.model.aux_head] if self.model.aux_head is not None else [])
