"""Adapter for timm's ``SwinTransformer`` (HetDPT's and VBP's Swin-T/S/B).

A Swin block is a pre-norm ViT block on channels-last ``(B, H, W, C)`` features whose attention runs inside
(shifted) windows: ``x + attn(norm1(x))`` with the attention partitioning the map into windows of ``W×W`` tokens,
then ``x + mlp(norm2(x))``. Two things set it apart for surgery:

- each head owns a column of the relative-position bias table ``((2W−1)², heads)``, so pruning heads must keep the
  kept heads' columns (:meth:`SwinAdapter.set_attention`'s ``heads``);
- the stream changes width at every patch merging (a ``4C → 2C`` Linear between stages), so there is no single
  embedding width, no [CLS] token and no token grid that survives the whole model.

What it can have done to it: attention-sublayer removal, GELU removal with the exact fc1·fc2 merge, FFN neurons
(VBP), heads and head dimensions, and gates (depth gates; HiAP's on whole heads, FFN blocks and neurons). Token
pruning and LRP (STAR, which ranks tokens by a [CLS] token Swin lacks), embedding-channel pruning and uneven value
widths (so HiAP does not gate value dimensions) are refused in one line.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from timm.models.swin_transformer import SwinTransformer, SwinTransformerBlock, WindowAttention
from torch import nn

from vitprune.adapters.base import (
    QKV, ActivationRemoval, AttentionRemoval, AttentionView, BlockView, FFNWidth, Gates, HeadWidth, InputResize,
    MlpView, OutputActivation,
)
from vitprune.adapters.channels import reject, slice_parameter, unwrap
from vitprune.adapters.timm_staged import TimmStagedAdapter
from vitprune.adapters.channels import set_prenorm
from vitprune.adapters.timm_vit import check_blocks, merge_mlp_linear


class SwinDepthBlock(nn.Module):
    """timm's ``SwinTransformerBlock`` whose attention may be gone, followed by an output activation.

    Without attention the branch is ``x + norm1(x)`` (the "norm" identity) or gone (``norm1 is None``), as in
    :class:`~vitprune.adapters.timm_blocks.DepthBlock`. The window partition, cyclic shift and shifted-window mask
    are timm's own code (``_attn`` and ``get_attn_mask`` are the block's methods), so a kept attention computes
    exactly what it did. Submodule names are timm's, so the surviving parts' state-dict keys do not change.
    """

    _attn = SwinTransformerBlock._attn
    get_attn_mask = SwinTransformerBlock.get_attn_mask

    def __init__(self, block: SwinTransformerBlock) -> None:
        super().__init__()
        for name in ("dim", "input_resolution", "target_shift_size", "always_partition", "dynamic_mask",
                     "window_size", "shift_size", "window_area", "mlp_ratio"):
            setattr(self, name, getattr(block, name))
        self.norm1, self.attn, self.drop_path1 = block.norm1, block.attn, block.drop_path1
        self.norm2, self.mlp, self.drop_path2 = block.norm2, block.mlp, block.drop_path2
        self.register_buffer("attn_mask", block.attn_mask, persistent=False)
        self.act = nn.Identity()
        self.train(block.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        if self.attn is not None:
            x = x + self.drop_path1(self._attn(self.norm1(x)))
        elif self.norm1 is not None:
            x = x + self.drop_path1(self.norm1(x))
        x = x.reshape(b, -1, c)
        x = x + self.drop_path2(self.mlp(self.norm2(x)))
        return self.act(x.reshape(b, h, w, c))


def _head_dim(attn: WindowAttention) -> int:
    # timm's WindowAttention keeps no head_dim: its forward reshapes qkv's rows into (3, heads, -1).
    return attn.qkv.out_features // (3 * attn.num_heads)


def _check_attention(path: str, attn: nn.Module | None) -> None:
    attn, _ = unwrap(attn)
    if attn is not None and type(attn) is not WindowAttention:
        raise reject(path, attn, "only timm's WindowAttention is supported")


class SwinAdapter(TimmStagedAdapter, AttentionRemoval, ActivationRemoval, OutputActivation, FFNWidth, HeadWidth,
                  Gates, InputResize):
    """timm ``SwinTransformer`` whose blocks are ``SwinTransformerBlock`` (or what depth surgery leaves of one)."""

    family = "timm-swin"
    family_modules = ("timm.models.swin_transformer", "vitprune.adapters.timm_swin")
    family_attributes = frozenset({"relative_position_bias_table", "relative_position_index", "downsample",
                                   "shift_size", "window_area", "input_resolution", "reduction"})
    stages_attribute = "layers"
    lacking_reasons = {
        "token_reduction": "Swin's windows and patch merging need the whole token grid",
        "lrp": "Swin has no [CLS] token to rank tokens by (it averages its last stage's tokens)"}

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model)
        check_blocks(self._blocks(), (SwinTransformerBlock, SwinDepthBlock), "SwinTransformerBlock", _check_attention)

    def set_input_size(self, height: int, width: int) -> None:
        self._check_size(height, width)
        # Each stage keeps its windows (their relative position biases stay as trained), so its grid must be a
        # whole number of them; timm's own resize then recomputes the grids, shifts and attention masks.
        windows = [tuple(stage.blocks[0].window_size) for stage in self.model.layers]
        for s, (info, window) in enumerate(zip(self.model.feature_info, windows, strict=True)):
            grid = (height // info["reduction"], width // info["reduction"])
            if grid[0] % window[0] or grid[1] % window[1]:
                raise ValueError(f"{height}x{width} images give stage {s} a {grid[0]}x{grid[1]} grid, which its "
                                 f"{window[0]}x{window[1]} windows do not tile")
        self.model.set_input_size(img_size=(height, width), window_size=windows)
        self._record_size(height, width)

    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        return isinstance(model, SwinTransformer)

    def blocks(self) -> list[BlockView]:
        views = []
        for index, (name, block) in enumerate(self._blocks()):
            (a, attn_gate), m = unwrap(block.attn), block.mlp
            act, act_gate = unwrap(m.act)
            attn = None
            if a is not None:
                hd = _head_dim(a)
                attn = AttentionView(module=a, qkv=QKV.of_heads((a.qkv,), a.num_heads, hd), proj=a.proj,
                                     num_heads=a.num_heads, head_dim=hd, gate=attn_gate, scale=a.scale,
                                     context=block.window_area, head_parameters=(a.relative_position_bias_table,))
            views.append(BlockView(
                index=index, name=name, module=block, norm1=block.norm1, attn=attn,
                ls1=nn.Identity() if block.norm1 is not None else None, drop_path1=block.drop_path1,
                norm2=block.norm2,
                mlp=MlpView(module=m, fc1=m.fc1, act=act, fc2=m.fc2 if isinstance(m.fc2, nn.Linear) else None,
                            gate=act_gate),
                ls2=nn.Identity(), drop_path2=block.drop_path2,
                act=block.act if isinstance(block, SwinDepthBlock) else nn.Identity()))
        return views

    def block_tokens(self, x: torch.Tensor) -> int:
        return x.shape[1] * x.shape[2]  # channels-last (B, H, W, C)

    @property
    def stem(self) -> nn.Module:
        return self.model.patch_embed.proj

    @property
    def stream_writers(self) -> list[nn.Module]:
        return [self.stem, *(stage.downsample.reduction for stage in self.model.layers
                             if not isinstance(stage.downsample, nn.Identity))]

    def _depth_block(self, index: int) -> SwinDepthBlock:
        """Block ``index`` as a :class:`SwinDepthBlock`, converting timm's block in place."""
        name, block = self._block(index)
        if isinstance(block, SwinDepthBlock):
            return block
        stage, _, j = name.rpartition(".")
        new = self.model.get_submodule(stage)[int(j)] = SwinDepthBlock(block)
        return new

    def _attention(self, index: int) -> WindowAttention:
        name, block = self._block(index)
        attn, _ = unwrap(block.attn)
        if attn is None:
            raise ValueError(f"{name} has no attention")
        return attn

    def set_attention(self, index: int, qkv: Sequence[nn.Linear], proj: nn.Linear, num_heads: int,
                      head_dim: int | None = None, heads: Sequence[int] | None = None) -> None:
        name, _ = self._block(index)
        if len(qkv) != 1:
            raise ValueError(f"{name}.attn fuses q, k and v into one Linear; got {len(qkv)} projections")
        (qkv,) = qkv
        attn = self._attention(index)
        old_dim = _head_dim(attn)
        head_dim = old_dim if head_dim is None else head_dim
        if heads is None and num_heads != attn.num_heads:
            raise ValueError(f"{name}.attn keeps a relative-position bias per head: say which heads remain")
        if heads is not None and len(heads) != num_heads:
            raise ValueError(f"{name}.attn: {len(heads)} kept heads named for {num_heads} heads")
        if qkv.out_features != 3 * num_heads * head_dim or proj.in_features != num_heads * head_dim:
            raise ValueError(f"{name}.attn: projections do not fit {num_heads} heads of dim {head_dim}")
        if heads is not None:
            slice_parameter(attn, "relative_position_bias_table", 1, list(heads))
        attn.qkv, attn.proj, attn.num_heads = qkv, proj, num_heads
        # timm's fused kernel scales by head_dim**-0.5 of the tensors it gets; the unfused path must agree.
        if head_dim != old_dim:
            attn.scale = head_dim ** -0.5

    def merge_mlp(self, index: int, linear: nn.Linear) -> None:
        merge_mlp_linear(self._block(index)[1].mlp, linear)

    def remove_attention(self, index: int, norm: nn.Module | None) -> None:
        block = self._depth_block(index)
        if block.attn is None:
            raise ValueError(f"{self._block(index)[0]} has no attention to remove")
        block.attn, block.norm1 = None, norm
        if norm is None:
            block.drop_path1 = None

    def set_norm(self, index: int, position: int, norm: nn.Module) -> None:
        set_prenorm(*self._block(index), position, norm)

    def set_output_activation(self, index: int, act: nn.Module) -> None:
        self._depth_block(index).act = act

    def set_attention_module(self, index: int, module: nn.Module) -> None:
        name, block = self._block(index)
        _check_attention(f"{name}.attn", module)
        if block.attn is None:
            raise ValueError(f"{name} has no attention")
        block.attn = module
