"""Adapter for timm's ``VisionTransformer`` family (ViT, DeiT, distilled DeiT, DINOv2, GAP ViTs)."""

from __future__ import annotations

from timm.layers import Attention, Mlp
from timm.models.vision_transformer import Block, VisionTransformer
from torch import nn

from vitprune.adapters.base import AttentionView, BlockView, MlpView, ViTAdapter
from vitprune.errors import UnsupportedArchitectureError


def _reject(path: str, module: nn.Module, why: str) -> UnsupportedArchitectureError:
    return UnsupportedArchitectureError(f"unsupported architecture: {path} is {type(module).__name__} ({why})")


def _check_attention(path: str, attn: nn.Module) -> None:
    if type(attn) is not Attention:
        raise _reject(path, attn, "only timm's standard fused-qkv Attention is supported")
    if getattr(attn, "gate", None) is not None:
        raise _reject(path, attn, "gated attention output is not supported")
    if not isinstance(attn.norm, nn.Identity):
        raise _reject(path, attn, "a norm over the concatenated heads (scale_norm) is not supported")


def _check_mlp(path: str, mlp: nn.Module) -> None:
    if type(mlp) is not Mlp:
        raise _reject(path, mlp, "only the plain fc1 -> activation -> fc2 MLP is supported; "
                                 "gated (GLU/SwiGLU) MLPs cannot be represented")
    merged = isinstance(mlp.fc2, nn.Identity) and isinstance(mlp.act, nn.Identity)
    if not isinstance(mlp.fc1, nn.Linear) or not (isinstance(mlp.fc2, nn.Linear) or merged):
        raise _reject(path, mlp, "fc1 and fc2 must be nn.Linear, or fc2 the identity after a merge")
    if not isinstance(mlp.norm, nn.Identity):
        raise _reject(path, mlp, "a norm inside the MLP (scale_mlp_norm) is not supported")


class TimmViTAdapter(ViTAdapter):
    """timm ``VisionTransformer`` and subclasses whose blocks are timm's pre-norm ``Block``."""

    family = "timm-vit"

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model)
        for i, block in enumerate(model.blocks):
            path = f"blocks.{i}"
            if type(block) is not Block:
                raise _reject(path, block, "only timm's pre-norm Block is supported")
            _check_attention(f"{path}.attn", block.attn)
            _check_mlp(f"{path}.mlp", block.mlp)

    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        return isinstance(model, VisionTransformer)

    def blocks(self) -> list[BlockView]:
        return [self._view(i, block) for i, block in enumerate(self.model.blocks)]

    @staticmethod
    def _view(index: int, block: Block) -> BlockView:
        a, m = block.attn, block.mlp
        return BlockView(
            index=index,
            name=f"blocks.{index}",
            module=block,
            norm1=block.norm1,
            attn=AttentionView(module=a, qkv=a.qkv, proj=a.proj, num_heads=a.num_heads, head_dim=a.head_dim),
            ls1=block.ls1,
            drop_path1=block.drop_path1,
            norm2=block.norm2,
            mlp=MlpView(module=m, fc1=m.fc1, act=m.act, fc2=m.fc2 if isinstance(m.fc2, nn.Linear) else None),
            ls2=block.ls2,
            drop_path2=block.drop_path2,
        )

    @property
    def embed_dim(self) -> int:
        return self.model.embed_dim

    @property
    def num_prefix_tokens(self) -> int:
        return self.model.num_prefix_tokens

    @property
    def grid_size(self) -> tuple[int, int]:
        return tuple(self.model.patch_embed.grid_size)

    @property
    def input_size(self) -> tuple[int, int, int]:
        pe = self.model.patch_embed
        return (pe.proj.in_channels, *pe.img_size)

    def classifier_heads(self) -> list[nn.Module]:
        heads = [self.model.head, getattr(self.model, "head_dist", None)]
        return [h for h in heads if isinstance(h, nn.Linear)]

    def set_attention(self, index: int, qkv: nn.Linear, proj: nn.Linear, num_heads: int) -> None:
        attn = self.model.blocks[index].attn
        head_dim = attn.head_dim
        if qkv.out_features != 3 * num_heads * head_dim or proj.in_features != num_heads * head_dim:
            raise ValueError(f"blocks.{index}.attn: projections do not fit {num_heads} heads of dim {head_dim}")
        attn.qkv, attn.proj = qkv, proj
        attn.num_heads = num_heads
        attn.attn_dim = num_heads * head_dim

    def set_mlp(self, index: int, fc1: nn.Linear, fc2: nn.Linear | None) -> None:
        mlp = self.model.blocks[index].mlp
        if fc2 is None:
            if not isinstance(mlp.act, nn.Identity):
                raise ValueError(f"blocks.{index}.mlp: cannot install a merged MLP while its activation is present")
            # timm's Mlp runs fc1 -> act -> fc2; with both identities it is exactly the merged linear.
            fc2 = nn.Identity()
        elif fc1.out_features != fc2.in_features:
            raise ValueError(f"blocks.{index}.mlp: fc1 gives {fc1.out_features} features, fc2 takes {fc2.in_features}")
        mlp.fc1, mlp.fc2 = fc1, fc2
