"""The timm block form that depth surgery leaves behind where timm's ``Block`` cannot express the result."""

from __future__ import annotations

import torch
from timm.models.vision_transformer import Block
from torch import nn


class DepthBlock(nn.Module):
    """timm's pre-norm ``Block`` whose attention may be gone, followed by an output activation.

    Without attention (``attn is None``) the attention branch is either gone too (``norm1 is
    None``: ``x`` passes through) or reduced to ``x + drop_path1(ls1(norm1(x)))``, the reference
    HetDPT code's reading of "identity". ``act`` runs on the block output: ``nn.Identity`` unless
    the reference code's compatibility option put an activation there. Submodule names are
    ``Block``'s, so the state-dict keys of the surviving parts do not change.
    """

    def __init__(self, block: Block) -> None:
        super().__init__()
        self.norm1, self.attn, self.ls1, self.drop_path1 = block.norm1, block.attn, block.ls1, block.drop_path1
        self.norm2, self.mlp, self.ls2, self.drop_path2 = block.norm2, block.mlp, block.ls2, block.drop_path2
        self.act = nn.Identity()
        self.train(block.training)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        if self.attn is not None:
            x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x), attn_mask=attn_mask, is_causal=is_causal)))
        elif self.norm1 is not None:
            x = x + self.drop_path1(self.ls1(self.norm1(x)))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return self.act(x)
