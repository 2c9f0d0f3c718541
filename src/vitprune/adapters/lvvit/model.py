"""LV-ViT's model (Jiang et al., "All Tokens Matter: Token Labeling for Training Better Vision Transformers",
NeurIPS 2021).

LV-ViT is a ViT with three differences, each mapped onto timm's ``VisionTransformer`` so that every timm-ViT
edit applies unchanged:

- a four-convolution patch stem (7×7 stride 2, two 3×3, each with BatchNorm and ReLU, then a strided projection):
  :class:`ConvStemEmbed`;
- residual branches divided by ``skip_lam``: a frozen LayerScale of ``1 / skip_lam`` after each sublayer (2 for S
  and M, a power of two, so the product is bit for bit the division);
- the token-labelling head: at inference the class logits plus half the maximum over patch tokens of the
  auxiliary per-token logits, as the original code's evaluation path computes them. vitprune trains the same
  output (it has no token-labelling loss). ``aux_head=False`` (the ``-cls`` models) keeps the class head alone, as
  STAR's code runs LV-ViT. Relevance (LRP) follows both heads: the adapter shows the token-labelling head as a
  :class:`~vitprune.adapters.base.TokenHead`.

The original layer names are kept, so an original checkpoint loads after :meth:`LVViT.checkpoint_filter` adds the
constant LayerScales.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from timm.layers import PatchEmbed
from timm.models.vision_transformer import VisionTransformer
from torch import nn


#: The released configurations: LV-ViT-S and LV-ViT-M (width, depth, heads, MLP ratio 3, skip_lam 2).
LVVIT_CONFIGS: dict[str, dict[str, Any]] = {
    "lvvit-s": {"embed_dim": 384, "depth": 16, "num_heads": 6},
    "lvvit-m": {"embed_dim": 512, "depth": 20, "num_heads": 8},
}
#: How the released weights expect their images (the original's default configs): ImageNet statistics, bicubic.
_CROP_PCT = {"lvvit-s": 0.9, "lvvit-m": 1.0}


class ConvStemEmbed(PatchEmbed):
    """LV-ViT's patch embedding: conv 7×7 stride 2 → BN → ReLU, twice conv 3×3 → BN → ReLU, then a
    ``patch_size / 2`` strided projection, so each token still covers ``patch_size`` pixels."""

    def __init__(self, img_size: int = 224, patch_size: int = 16, in_chans: int = 3, embed_dim: int = 768,
                 stem_channels: int = 64, **kwargs: Any) -> None:
        super().__init__(img_size=img_size, patch_size=patch_size, in_chans=in_chans, embed_dim=embed_dim, **kwargs)
        c = stem_channels
        self.conv1 = nn.Conv2d(in_chans, c, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.conv3 = nn.Conv2d(c, c, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU()
        self.proj = nn.Conv2d(c, embed_dim, kernel_size=patch_size // 2, stride=patch_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if tuple(x.shape[-2:]) != tuple(self.img_size):
            raise ValueError(f"input of {tuple(x.shape[-2:])} pixels; the model takes {tuple(self.img_size)}")
        for conv, bn in ((self.conv1, self.bn1), (self.conv2, self.bn2), (self.conv3, self.bn3)):
            x = self.relu(bn(conv(x)))
        return self.norm(self.proj(x).flatten(2).transpose(1, 2))


class LVViT(VisionTransformer):
    """LV-ViT on timm's ``VisionTransformer`` (see the module's description); ``aux_head=False`` drops the
    token-labelling head (the class head alone)."""

    #: The token-labelling head's weight at inference, as the original evaluates.
    aux_weight = 0.5

    def __init__(self, *, skip_lam: float = 2.0, stem_channels: int = 64, aux_head: bool = True,
                 mlp_ratio: float = 3.0, **kwargs: Any) -> None:
        super().__init__(embed_layer=partial(ConvStemEmbed, stem_channels=stem_channels), init_values=1 / skip_lam,
                         mlp_ratio=mlp_ratio, qkv_bias=False, class_token=True, global_pool="token",
                         norm_layer=partial(nn.LayerNorm, eps=1e-5), **kwargs)
        self.skip_lam = skip_lam
        for block in self.blocks:  # a constant in the original, not a learned scale
            block.ls1.gamma.requires_grad_(False)
            block.ls2.gamma.requires_grad_(False)
        self.aux_head = nn.Linear(self.embed_dim, self.num_classes) if aux_head and self.num_classes else None

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        logits = super().forward_head(x, pre_logits=pre_logits)
        if pre_logits or self.aux_head is None:
            return logits
        return logits + self.aux_weight * self.aux_head(x[:, self.num_prefix_tokens:]).max(dim=1).values

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        super().reset_classifier(num_classes, global_pool)
        if self.aux_head is not None:
            self.aux_head = nn.Linear(self.embed_dim, num_classes) if num_classes else None

    def checkpoint_filter(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """An original LV-ViT state dict in this model's layout: the constant LayerScales added where it has none
        (the other names are the original's), the token-labelling head dropped where this model has none."""
        state = {k: v for k, v in state.items() if self.aux_head is not None or not k.startswith("aux_head.")}
        for i, block in enumerate(self.blocks):
            for name in ("ls1", "ls2"):
                key = f"blocks.{i}.{name}.gamma"
                if key not in state:
                    state[key] = torch.full_like(getattr(block, name).gamma, 1 / self.skip_lam)
        return state


def build_lvvit(name: str, **kwargs: Any) -> LVViT:
    """LV-ViT ``name`` (a key of :data:`LVVIT_CONFIGS`) with random weights; ``kwargs`` override its configuration
    (``img_size``, ``patch_size``, ``stem_channels``, ``depth``, ``num_classes``, ``aux_head``, ...)."""
    model = LVViT(**{**LVVIT_CONFIGS[name], **kwargs})
    model.pretrained_cfg = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225), "interpolation": "bicubic",
                            "crop_pct": _CROP_PCT[name], "input_size": (3, *model.patch_embed.img_size)}
    return model
