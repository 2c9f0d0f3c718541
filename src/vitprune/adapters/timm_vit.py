"""Adapter for timm's ``VisionTransformer`` family (ViT, DeiT, distilled DeiT, DINOv2, GAP ViTs)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from timm.data import resolve_model_data_config
from timm.layers import Attention, Mlp
from timm.models.vision_transformer import Block, VisionTransformer
from torch import nn

from vitprune.adapters.base import (
    QKV, ActivationRemoval, AttentionRemoval, AttentionView, BlockView, DenseFeatures, EmbedWidth, FFNWidth, Gates,
    HeadWidth, InputResize, LRPRelevance, MlpView, OutputActivation, TokenReduction, ValueWidth, ViTAdapter,
)
from vitprune.adapters.channels import (linear_modules, parameters_named, reject, set_mlp_linears, set_prenorm,
                                         slice_conv_outputs, slice_head_inputs, slice_norm, slice_parameter, unwrap)
from vitprune.adapters.timm_blocks import (DepthBlock, TokenBlock, TokenBlocks, VariableHeadAttention,
                                          constant_output, run_block)
from vitprune.adapters.tokens import token_feature_maps
from vitprune.linear import slice_linear


def _fused(index: int, qkv: Sequence[nn.Linear]) -> nn.Linear:
    """The one fused ``[q | k | v]`` Linear timm's attention holds."""
    if len(qkv) != 1:
        raise ValueError(f"blocks.{index}.attn fuses q, k and v into one Linear; got {len(qkv)} projections")
    return qkv[0]


def _check_attention(path: str, attn: nn.Module | None) -> None:
    attn, _ = unwrap(attn)
    if attn is None:
        return
    if type(attn) is VariableHeadAttention:
        return
    if type(attn) is not Attention:
        raise reject(path, attn, "only timm's standard fused-qkv Attention is supported")
    if getattr(attn, "gate", None) is not None:
        raise reject(path, attn, "gated attention output is not supported")
    if not isinstance(attn.norm, nn.Identity):
        raise reject(path, attn, "a norm over the concatenated heads (scale_norm) is not supported")


def timm_data_config(model: nn.Module) -> dict[str, Any]:
    """How timm's pretrained config says images are prepared for a timm model's weights."""
    config = resolve_model_data_config(model)
    return {key: config[key] for key in ("mean", "std", "interpolation", "crop_pct", "crop_mode") if key in config}


class TimmModel:
    """What a timm classifier says of itself whatever its family (the ViT, Swin and ConvNeXt adapters mix it in):
    its number of classes and how timm prepares images for its weights."""

    model: nn.Module

    @property
    def num_classes(self) -> int:
        return self.model.num_classes

    @property
    def data_config(self) -> dict[str, Any] | None:
        return timm_data_config(self.model)

    def intermediates(self, images: torch.Tensor, indices: int | Sequence[int] | None = None,
                      norm: bool = False) -> list[torch.Tensor]:
        return self.model.forward_intermediates(images, indices=indices, norm=norm, intermediates_only=True)

    def feature_modules(self) -> list[str]:
        info = getattr(self.model, "feature_info", None)  # timm's own record of where each map comes from
        return [x["module"] for x in info] if info else super().feature_modules()


def merge_mlp_linear(mlp: nn.Module, linear: nn.Linear) -> None:
    """Make timm's ``Mlp`` the one Linear ``linear``."""
    # timm's Mlp runs fc1 -> act -> drop1 -> norm -> fc2 -> drop2; with identities it is exactly `linear`.
    mlp.fc1, mlp.act, mlp.drop1, mlp.fc2 = linear, nn.Identity(), nn.Identity(), nn.Identity()


def set_mlp_activation(mlp: nn.Module, path: str, act: nn.Module) -> None:
    """Install ``act`` as the activation of timm's ``Mlp`` at ``path``, which must not be merged."""
    if isinstance(mlp.fc2, nn.Identity):
        raise ValueError(f"{path} is merged and has no activation")
    mlp.act = act


def check_blocks(blocks: Iterable[tuple[str, nn.Module]], kinds: tuple[type, ...], kind: str,
                 check_attention: Callable[[str, nn.Module], None]) -> None:
    """Refuse, in one line naming it, a block (``(path, block)`` pairs) of a type not in ``kinds`` (``kind``: what
    they are called), or whose attention (``check_attention``) or MLP a timm family's adapter cannot edit."""
    for path, block in blocks:
        if type(block) not in kinds:
            raise reject(path, block, f"only timm's {kind} is supported")
        check_attention(f"{path}.attn", block.attn)
        check_mlp(f"{path}.mlp", block.mlp)


def check_mlp(path: str, mlp: nn.Module) -> None:
    """Refuse an MLP other than timm's plain ``fc1 -> act -> fc2`` of Linears (or its merged form), in one line."""
    if type(mlp) is not Mlp:
        raise reject(path, mlp, "only the plain fc1 -> activation -> fc2 MLP is supported; "
                                 "gated (GLU/SwiGLU) MLPs cannot be represented")
    merged = isinstance(mlp.fc2, nn.Identity) and isinstance(unwrap(mlp.act)[0], nn.Identity)
    if not isinstance(mlp.fc1, nn.Linear) or not (isinstance(mlp.fc2, nn.Linear) or merged):
        raise reject(path, mlp, "fc1 and fc2 must be nn.Linear, or fc2 the identity after a merge")
    if not isinstance(mlp.norm, nn.Identity):
        raise reject(path, mlp, "a norm inside the MLP (scale_mlp_norm) is not supported")


#: The learned tokens and position embedding a timm ViT adds to the stream.
_TOKEN_PARAMETERS = ("cls_token", "reg_token", "dist_token", "pos_embed")


def _slice_layer_scale(ls: nn.Module | None, keep: list[int], path: str) -> None:
    if ls is None or isinstance(ls, nn.Identity):
        return
    if not isinstance(getattr(ls, "gamma", None), torch.Tensor):
        raise reject(path, ls, "not a LayerScale with a per-channel gamma")
    slice_parameter(ls, "gamma", 0, keep)


class TimmViTAdapter(TimmModel, ViTAdapter, AttentionRemoval, ActivationRemoval, OutputActivation, FFNWidth,
                     HeadWidth, ValueWidth, EmbedWidth, TokenReduction, LRPRelevance, Gates, DenseFeatures,
                     InputResize):
    """timm ``VisionTransformer`` and subclasses whose blocks are timm's pre-norm ``Block``.

    Depth surgery turns a block whose attention is removed into a :class:`DepthBlock`, and so does
    width pruning that leaves a sublayer no unit (the block then skips it at inference); the other
    edits keep timm's own modules (a merged MLP is timm's ``Mlp`` with identity activation and fc2).
    """

    family = "timm-vit"
    family_modules = ("timm.models", "timm.layers", "vitprune.adapters.timm_vit", "vitprune.adapters.timm_blocks")
    family_attributes = frozenset({
        "patch_embed", "cls_token", "dist_token", "reg_token", "num_reg_tokens", "pos_embed", "pos_drop",
        "patch_drop", "norm_pre", "fc_norm", "head_dist", "head_drop", "attn_pool", "global_pool", "has_class_token",
        "no_embed_class", "distilled_training", "set_distilled_training", "forward_features", "forward_head",
        "attn_drop", "proj_drop", "fused_attn", "drop1", "drop2",
    })

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model)
        check_blocks(((f"blocks.{i}", block) for i, block in enumerate(model.blocks)),
                     (Block, DepthBlock, TokenBlock), "pre-norm Block", _check_attention)

    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        return isinstance(model, VisionTransformer)

    def blocks(self) -> list[BlockView]:
        return [self._view(i, block) for i, block in enumerate(self.model.blocks)]

    @staticmethod
    def _view(index: int, block: Block | DepthBlock | TokenBlock) -> BlockView:
        (a, attn_gate), m = unwrap(block.attn), block.mlp
        act, act_gate = unwrap(m.act)
        attn = None
        if a is not None:
            value_dims = tuple(a.value_dims) if isinstance(a, VariableHeadAttention) else None
            attn = AttentionView(
                module=a, qkv=QKV.of_heads((a.qkv,), a.num_heads, a.head_dim, value_dims), proj=a.proj,
                num_heads=a.num_heads, head_dim=a.head_dim, gate=attn_gate, value_dims=value_dims,
                q_norm=a.q_norm, k_norm=a.k_norm, scale=a.scale)
        return BlockView(
            index=index,
            name=f"blocks.{index}",
            module=block,
            norm1=block.norm1,
            attn=attn,
            ls1=block.ls1,
            drop_path1=block.drop_path1,
            norm2=block.norm2,
            mlp=MlpView(module=m, fc1=m.fc1, act=act, fc2=m.fc2 if isinstance(m.fc2, nn.Linear) else None,
                        gate=act_gate),
            ls2=block.ls2,
            drop_path2=block.drop_path2,
            act=block.act if isinstance(block, DepthBlock) else nn.Identity(),
            token_op=block.tokens if isinstance(block, TokenBlock) else None,
        )

    @property
    def embed_dim(self) -> int:
        return self.model.embed_dim

    @property
    def num_features(self) -> int:
        return self.embed_dim

    def set_distillation_split(self, on: bool) -> bool:
        if not hasattr(self.model, "set_distilled_training"):  # timm's distilled DeiT has it
            return False
        self.model.set_distilled_training(on)
        return True

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

    def set_input_size(self, height: int, width: int) -> None:
        patch = tuple(self.model.patch_embed.patch_size)
        if height % patch[0] or width % patch[1]:
            raise ValueError(f"{height}x{width} images are not tiled by the model's {patch[0]}x{patch[1]} patches")
        # timm's own resize: the patch grid, the position embedding (resampled as timm loads a checkpoint at another
        # size) and the model's data config.
        self.model.set_input_size(img_size=(height, width))

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        m = self.model
        return m.norm_pre(m.patch_drop(m._pos_embed(m.patch_embed(images))))

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.forward_head(self.model.norm(x), pre_logits=True)

    @property
    def pools_class_token(self) -> bool:
        m = self.model
        return getattr(m, "cls_token", None) is not None and m.global_pool == "token" \
            and getattr(m, "head_dist", None) is None

    @property
    def pools_every_token(self) -> bool:
        return self.model.global_pool != "token"

    def pre_logits(self, x: torch.Tensor) -> torch.Tensor:
        # timm's own head path: pool, fc_norm, head dropout; a distilled DeiT averages its two tokens.
        return self.model.forward_head(self.model.forward_features(x), pre_logits=True)

    @property
    def stem(self) -> nn.Module:
        return self.model.patch_embed.proj

    def token_parameters(self) -> list[nn.Parameter]:
        return parameters_named(self.model, _TOKEN_PARAMETERS)

    def classifier_heads(self) -> list[nn.Module]:
        return linear_modules(self.model.head, getattr(self.model, "head_dist", None))

    def set_num_classes(self, num_classes: int) -> None:
        self.model.reset_classifier(num_classes)  # distilled DeiT's and LV-ViT's replace their second heads too

    def _depth_block(self, index: int) -> DepthBlock:
        """Block ``index`` as a :class:`DepthBlock`, converting a timm ``Block`` in place."""
        block = self.model.blocks[index]
        if isinstance(block, TokenBlock):
            raise ValueError(f"blocks.{index} reduces tokens; depth surgery on such a block is not supported")
        if not isinstance(block, DepthBlock):
            block = self.model.blocks[index] = DepthBlock(block)
        return block

    def _skip_constant(self, index: int) -> None:
        """Make block ``index`` a :class:`DepthBlock` if it is timm's ``Block`` with a sublayer left no unit."""
        block = self.model.blocks[index]
        if type(block) is Block and (constant_output(block.attn) is not None or
                                     constant_output(block.mlp) is not None):
            self._depth_block(index)

    def set_attention(self, index: int, qkv: Sequence[nn.Linear], proj: nn.Linear, num_heads: int,
                      head_dim: int | None = None, heads: Sequence[int] | None = None) -> None:
        qkv = _fused(index, qkv)
        attn, _ = unwrap(self.model.blocks[index].attn)
        if attn is None:
            raise ValueError(f"blocks.{index} has no attention")
        if isinstance(attn, VariableHeadAttention):
            raise ValueError(f"blocks.{index}.attn has heads of different value widths; prune it with "
                             "prune_attention_dims")
        head_dim = attn.head_dim if head_dim is None else head_dim
        if qkv.out_features != 3 * num_heads * head_dim or proj.in_features != num_heads * head_dim:
            raise ValueError(f"blocks.{index}.attn: projections do not fit {num_heads} heads of dim {head_dim}")
        attn.qkv, attn.proj = qkv, proj
        # timm's fused kernel always scales by head_dim**-0.5 of the tensors it gets; the unfused path must agree.
        attn.scale = head_dim ** -0.5 if head_dim != attn.head_dim else attn.scale
        attn.num_heads, attn.head_dim = num_heads, head_dim
        attn.attn_dim = num_heads * head_dim

    def set_mlp(self, index: int, fc1: nn.Linear, fc2: nn.Linear | None) -> None:
        set_mlp_linears(self.model.blocks[index].mlp, f"blocks.{index}.mlp", fc1, fc2)
        if fc2 is not None:
            self._skip_constant(index)

    def merge_mlp(self, index: int, linear: nn.Linear) -> None:
        block = self.model.blocks[index]
        merge_mlp_linear(block.mlp, linear)
        block.ls2 = nn.Identity()

    def remove_attention(self, index: int, norm: nn.Module | None) -> None:
        block = self._depth_block(index)
        if block.attn is None:
            raise ValueError(f"blocks.{index} has no attention to remove")
        block.attn, block.norm1, block.ls1 = None, norm, nn.Identity() if norm is not None else None
        if norm is None:
            block.drop_path1 = None

    def set_norm(self, index: int, position: int, norm: nn.Module) -> None:
        set_prenorm(f"blocks.{index}", self.model.blocks[index], position, norm)

    def set_output_activation(self, index: int, act: nn.Module) -> None:
        self._depth_block(index).act = act

    def set_attention_module(self, index: int, module: nn.Module) -> None:
        _check_attention(f"blocks.{index}.attn", module)
        block = self.model.blocks[index]
        if block.attn is None:
            raise ValueError(f"blocks.{index} has no attention")
        block.attn = module
        self._skip_constant(index)

    def set_value_dims(self, index: int, qkv: Sequence[nn.Linear], proj: nn.Linear, value_dims: list[int]) -> None:
        attn = self.model.blocks[index].attn
        self.set_attention_module(index, VariableHeadAttention(attn, qkv=_fused(index, qkv), proj=proj,
                                                               value_dims=value_dims))

    def set_activation(self, index: int, act: nn.Module) -> None:
        set_mlp_activation(self.model.blocks[index].mlp, f"blocks.{index}.mlp", act)

    def prune_embed_dims(self, keep: list[int]) -> None:
        model = self.model
        if model.attn_pool is not None:
            raise reject("attn_pool", model.attn_pool, "attention pooling cannot lose channels")
        model.patch_embed.proj = slice_conv_outputs(model.patch_embed.proj, keep)
        model.patch_embed.norm = slice_norm(model.patch_embed.norm, keep, "patch_embed.norm")
        for name in _TOKEN_PARAMETERS:
            slice_parameter(model, name, 2, keep)
        for name in ("norm_pre", "norm", "fc_norm"):
            setattr(model, name, slice_norm(getattr(model, name), keep, name))
        slice_head_inputs(self.classifier_heads(), keep)
        for view in self.blocks():
            self._prune_block_embed_dims(view, keep)
        model.embed_dim = model.num_features = model.head_hidden_size = len(keep)

    def _prune_block_embed_dims(self, view: BlockView, keep: list[int]) -> None:
        block, path = view.module, view.name
        block.norm1 = slice_norm(block.norm1, keep, f"{path}.norm1")
        block.norm2 = slice_norm(block.norm2, keep, f"{path}.norm2")
        _slice_layer_scale(block.ls1, keep, f"{path}.ls1")
        _slice_layer_scale(block.ls2, keep, f"{path}.ls2")
        if view.attn is not None:
            (view.attn.module.qkv,) = view.attn.qkv.select_inputs(keep)
            view.attn.module.proj = slice_linear(view.attn.proj, out_idx=keep)
        set_mlp_linears(view.mlp.module, f"{path}.mlp", *view.mlp.select_embed(keep))

    def set_token_op(self, index: int, op: nn.Module) -> None:
        block = self.model.blocks[index]
        if isinstance(block, TokenBlock):
            block.tokens = op
            return
        if block.attn is None or constant_output(block.attn) is not None:
            # Checked first: such a block has nothing to rank or match by, whatever its form (STAR's schedule and
            # ToMe's skip it).
            raise ValueError(f"blocks.{index} has no attention head left, so no [CLS] attention or keys to reduce "
                             "its tokens by")
        plain = type(block) is Block or (type(block) is DepthBlock and isinstance(block.act, nn.Identity))
        if not plain or type(block.attn) not in (Attention, VariableHeadAttention):
            raise ValueError(f"blocks.{index}: token reduction needs timm's Block with ungated attention (timm's own "
                             "or variable-width heads)")
        if op.reads == "cls_row" and getattr(self.model, "cls_token", None) is None:
            raise ValueError("token pruning scores patches by the [CLS] token's attention; this model has none")
        if not isinstance(self.model.blocks, TokenBlocks):
            self.model.blocks = TokenBlocks(*self.model.blocks)
        self.model.blocks[index] = TokenBlock(block, op)

    def intermediates(self, images: torch.Tensor, indices: int | Sequence[int] | None = None,
                      norm: bool = False) -> list[torch.Tensor]:
        m = self.model
        if not isinstance(m.blocks, TokenBlocks):  # timm's own, which knows no token pruning
            return super().intermediates(images, indices, norm)
        return token_feature_maps(m.blocks, self.embed(images), run_block, indices, self.num_prefix_tokens,
                                  m.patch_embed.dynamic_feat_size(tuple(images.shape[-2:])), m.norm if norm else None)
