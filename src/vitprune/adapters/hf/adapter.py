"""The adapter of Hugging Face ``transformers`` ViT and DeiT image classifiers (the optional extra ``vitprune[hf]``).

A transformers layer is pre-norm like timm's, but its parts differ, and this adapter owns the differences: separate
query, key and value projections (``q_proj``, ``k_proj``, ``v_proj``, then ``o_proj``); no LayerScale; one dropout
that both residual branches share; the MLP as ``fc1 → activation_fn → fc2``; an attention that returns ``(output,
attention map)``; the model's output a ``ModelOutput`` rather than logits (hence :class:`HFImageClassifier`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from vitprune.adapters.base import (
    QKV, ActivationRemoval, AttentionRemoval, AttentionView, BlockView, DenseFeatures, EmbedWidth, FFNWidth, Gates,
    HeadWidth, InputResize, LRPRelevance, MlpView, OutputActivation, TokenReduction, ValueWidth, ViTAdapter,
)
from vitprune.adapters.channels import (linear_modules, parameters_named, reject, set_mlp_linears, set_prenorm,
                                         slice_conv_outputs, slice_head_inputs, slice_norm, slice_parameter, unwrap)
from vitprune.adapters.hf.hub import write_pretrained
from vitprune.adapters.hf.modules import (
    ATTENTIONS, LAYERS, MLPS, HFBlock, HFImageClassifier, HFTokenBlock, HFVariableHeadAttention, run_layer,
)
from vitprune.adapters.tokens import token_feature_maps
from vitprune.layers import GatedLayer
from vitprune.linear import slice_linear

#: The learned tokens and position embedding of the embeddings module.
_TOKEN_PARAMETERS = ("cls_token", "distillation_token", "position_embeddings")
#: The oldest transformers whose ViT and DeiT layers have the layout above (``q_proj`` … ``mlp.fc2``).
MIN_TRANSFORMERS = "5.24"


def _check_layer(path: str, layer: nn.Module) -> None:
    if type(layer).__name__ not in LAYERS and not isinstance(layer, (HFBlock, HFTokenBlock)):
        raise reject(path, layer, f"only transformers' {' and '.join(LAYERS)} are supported")
    attn, _ = unwrap(layer.attention)
    if attn is not None and not _is_attention(attn):
        raise reject(f"{path}.attention", attn, "not transformers' ViT or DeiT attention; transformers older than "
                                                f"{MIN_TRANSFORMERS} lay it out differently")
    mlp = layer.mlp
    if type(mlp).__name__ not in MLPS:
        raise reject(f"{path}.mlp", mlp, "not transformers' ViT or DeiT MLP")
    if not isinstance(mlp.fc1, nn.Linear) or not isinstance(mlp.fc2, (nn.Linear, nn.Identity)):
        raise reject(f"{path}.mlp", mlp, "fc1 and fc2 must be nn.Linear, or fc2 the identity after a merge")


def _is_attention(module: nn.Module) -> bool:
    return type(module).__name__ in ATTENTIONS or isinstance(module, HFVariableHeadAttention)


class HFViTAdapter(ViTAdapter, AttentionRemoval, ActivationRemoval, OutputActivation, FFNWidth, HeadWidth, ValueWidth,
                   EmbedWidth, TokenReduction, LRPRelevance, Gates, DenseFeatures, InputResize):
    """transformers' ``ViTForImageClassification``, ``DeiTForImageClassification`` and
    ``DeiTForImageClassificationWithTeacher``, wrapped in :class:`HFImageClassifier`.

    Edits keep transformers' own modules where they can (fewer heads, narrower head dims, fewer
    neurons, a merged MLP as ``fc1`` with identity activation and ``fc2``); a layer that loses its
    attention, gets an output activation or a gated attention becomes an :class:`HFBlock`.
    """

    family = "hf-vit"
    family_modules = ("transformers", "vitprune.adapters.hf")
    family_attributes = frozenset({
        "layernorm_before", "layernorm_after", "q_proj", "k_proj", "v_proj", "o_proj", "activation_fn",
        "num_attention_heads", "patch_embeddings", "position_embeddings", "distillation_token", "cls_classifier",
        "distillation_classifier", "distillation_split", "base_model",
    })

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model)
        self._base = model.hf.base_model
        self._prefix = f"hf.{model.hf.base_model_prefix}"
        if getattr(self._base, "pooler", None) is not None:
            raise reject(f"{self._prefix}.pooler", self._base.pooler, "a pooler is not supported")
        for i, layer in enumerate(self._base.layers):
            _check_layer(f"{self._prefix}.layers.{i}", layer)

    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        return isinstance(model, HFImageClassifier)

    @property
    def _embeddings(self) -> nn.Module:
        return self._base.embeddings

    @property
    def _layers(self) -> nn.ModuleList:
        return self._base.layers

    @property
    def _teacher(self) -> bool:
        return self.model.has_distillation_head

    def blocks(self) -> list[BlockView]:
        return [self._view(i, layer) for i, layer in enumerate(self._layers)]

    def _view(self, index: int, layer: nn.Module) -> BlockView:
        a, attn_gate = unwrap(layer.attention)
        mlp = layer.mlp
        act, act_gate = unwrap(mlp.activation_fn)
        attn = None
        if a is not None:
            value_dims = tuple(a.value_dims) if isinstance(a, HFVariableHeadAttention) else None
            attn = AttentionView(
                module=a, qkv=QKV.of_heads((a.q_proj, a.k_proj, a.v_proj), a.num_attention_heads, a.head_dim,
                                           value_dims), proj=a.o_proj,
                num_heads=a.num_attention_heads, head_dim=a.head_dim, gate=attn_gate, value_dims=value_dims,
                scale=a.scaling)
        branch1 = a is not None or layer.layernorm_before is not None
        return BlockView(
            index=index, name=f"{self._prefix}.layers.{index}", module=layer, norm1=layer.layernorm_before,
            attn=attn, ls1=nn.Identity() if branch1 else None, drop_path1=layer.dropout if branch1 else None,
            norm2=layer.layernorm_after,
            mlp=MlpView(module=mlp, fc1=mlp.fc1, act=act, fc2=mlp.fc2 if isinstance(mlp.fc2, nn.Linear) else None,
                        gate=act_gate),
            ls2=nn.Identity(), drop_path2=layer.dropout, act=layer.act if isinstance(layer, HFBlock) else nn.Identity(),
            token_op=layer.tokens if isinstance(layer, HFTokenBlock) else None)

    @property
    def embed_dim(self) -> int:
        return self._embeddings.cls_token.shape[-1]

    @property
    def num_features(self) -> int:
        return self.embed_dim

    @property
    def num_classes(self) -> int:
        return self.model.hf.config.num_labels

    @property
    def data_config(self) -> dict[str, Any] | None:
        return data_config(self.model.preprocessing)

    def set_distillation_split(self, on: bool) -> bool:
        if not self._teacher:
            return False
        self.model.distillation_split = on
        return True

    @property
    def num_prefix_tokens(self) -> int:
        return 1 + (getattr(self._embeddings, "distillation_token", None) is not None)

    @property
    def grid_size(self) -> tuple[int, int]:
        pe = self._embeddings.patch_embeddings
        return pe.image_size[0] // pe.patch_size[0], pe.image_size[1] // pe.patch_size[1]

    @property
    def input_size(self) -> tuple[int, int, int]:
        pe = self._embeddings.patch_embeddings
        return pe.num_channels, pe.image_size[0], pe.image_size[1]

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        return self._embeddings(images)

    def set_input_size(self, height: int, width: int) -> None:
        emb = self._embeddings
        pe = emb.patch_embeddings
        if height % pe.patch_size[0] or width % pe.patch_size[1]:
            raise ValueError(f"{height}x{width} images are not tiled by the model's {pe.patch_size[0]}x"
                             f"{pe.patch_size[1]} patches")
        grid = (height // pe.patch_size[0], width // pe.patch_size[1])
        tokens = torch.zeros(1, self.num_prefix_tokens + grid[0] * grid[1], self.embed_dim)
        with torch.no_grad():  # transformers' own resampling (bicubic), the one its interpolate_pos_encoding runs
            resampled = emb.interpolate_pos_encoding(tokens, height, width).clone()
        emb.position_embeddings = nn.Parameter(resampled, requires_grad=emb.position_embeddings.requires_grad)
        pe.image_size, pe.num_patches = (height, width), grid[0] * grid[1]
        if hasattr(emb, "image_size"):  # ViT's embeddings check the images' size against their own copy
            emb.image_size = (height, width)
        self.model.hf.config.image_size = [height, width]  # what a transformers save (write_pretrained) says

    def _pool_normed(self, x: torch.Tensor) -> torch.Tensor:
        # A classifier with a distillation head reads the [CLS] and distillation tokens with one head each and
        # averages the logits; as for timm's distilled DeiT, its features are taken as the two tokens' mean.
        return (x[:, 0] + x[:, 1]) / 2 if self._teacher else x[:, 0]

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        return self._pool_normed(self._base.layernorm(x))

    @property
    def pools_class_token(self) -> bool:
        return not self._teacher

    def pre_logits(self, x: torch.Tensor) -> torch.Tensor:
        return self._pool_normed(self._base(pixel_values=x).last_hidden_state)

    @property
    def stem(self) -> nn.Module:
        return self._embeddings.patch_embeddings.projection

    def token_parameters(self) -> list[nn.Parameter]:
        return parameters_named(self._embeddings, _TOKEN_PARAMETERS)

    def classifier_heads(self) -> list[nn.Module]:
        hf = self.model.hf
        heads = (hf.cls_classifier, hf.distillation_classifier) if self._teacher else (hf.classifier,)
        return linear_modules(*heads)

    def set_num_classes(self, num_classes: int) -> None:
        hf = self.model.hf
        hf.config.num_labels = hf.num_labels = num_classes  # the config's labels follow, so a native save describes it
        names = ("cls_classifier", "distillation_classifier") if self._teacher else ("classifier",)
        for name in names:
            setattr(hf, name, nn.Linear(self.embed_dim, num_classes))

    def _attention(self, index: int) -> nn.Module:
        attn, _ = unwrap(self._layers[index].attention)
        if attn is None:
            raise ValueError(f"{self._prefix}.layers.{index} has no attention")
        return attn

    def _block(self, index: int) -> HFBlock:
        """Layer ``index`` as an :class:`HFBlock`, converting transformers' layer in place."""
        layer = self._layers[index]
        if isinstance(layer, HFTokenBlock):
            raise ValueError(f"{self._prefix}.layers.{index} prunes tokens; depth surgery on such a layer is not "
                             "supported")
        if not isinstance(layer, HFBlock):
            layer = self._replace_layer(index, HFBlock(layer))
        return layer

    def _replace_layer(self, index: int, new: nn.Module) -> nn.Module:
        """Put ``new`` in place of layer ``index``, with the forward hooks the old layer had.

        transformers 5 collects ``output_hidden_states`` with hooks it installs, at the model's first forward, on
        the modules of its own layer class: a converted layer would be left out and the list come back short and
        shifted. The hooks are installed now if they are not yet, and the new layer carries them on."""
        with contextlib.suppress(ImportError):  # transformers 4 collects hidden states in the layer loop instead
            from transformers.utils.output_capturing import maybe_install_capturing_hooks

            maybe_install_capturing_hooks(self.model.hf)
        old = self._layers[index]
        for hooks in ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called"):
            getattr(new, hooks).update(getattr(old, hooks))
        self._layers[index] = new
        return new

    def set_attention(self, index: int, qkv: Sequence[nn.Linear], proj: nn.Linear, num_heads: int,
                      head_dim: int | None = None, heads: Sequence[int] | None = None) -> None:
        attn = self._attention(index)
        if isinstance(attn, HFVariableHeadAttention):
            raise ValueError(f"{self._prefix}.layers.{index}.attention has heads of different value widths; prune it "
                             "with prune_attention_dims")
        head_dim = attn.head_dim if head_dim is None else head_dim
        width = num_heads * head_dim
        if len(qkv) != 3 or any(lin.out_features != width for lin in qkv) or proj.in_features != width:
            raise ValueError(f"{self._prefix}.layers.{index}.attention: projections do not fit {num_heads} heads of "
                             f"dim {head_dim} (separate q, k and v)")
        attn.q_proj, attn.k_proj, attn.v_proj = qkv
        attn.o_proj = proj
        if head_dim != attn.head_dim:
            attn.scaling = head_dim ** -0.5
        attn.num_attention_heads, attn.head_dim = num_heads, head_dim

    def set_mlp(self, index: int, fc1: nn.Linear, fc2: nn.Linear | None) -> None:
        set_mlp_linears(self._layers[index].mlp, f"{self._prefix}.layers.{index}.mlp", fc1, fc2)

    def merge_mlp(self, index: int, linear: nn.Linear) -> None:
        mlp = self._layers[index].mlp
        mlp.fc1, mlp.activation_fn, mlp.fc2 = linear, nn.Identity(), nn.Identity()

    def remove_attention(self, index: int, norm: nn.Module | None) -> None:
        self._attention(index)
        layer = self._block(index)
        layer.attention, layer.layernorm_before = None, norm

    def set_norm(self, index: int, position: int, norm: nn.Module) -> None:
        set_prenorm(f"{self._prefix}.layers.{index}", self._layers[index], position, norm,
                    names=("layernorm_before", "layernorm_after"))

    def set_output_activation(self, index: int, act: nn.Module) -> None:
        self._block(index).act = act

    def set_attention_module(self, index: int, module: nn.Module) -> None:
        self._attention(index)
        inner, _ = unwrap(module)
        if not _is_attention(inner):
            raise reject(f"{self._prefix}.layers.{index}.attention", inner, "not transformers' ViT or DeiT attention")
        # transformers' layer unpacks a tuple from its attention; a gated one returns the tensor alone.
        layer = self._block(index) if isinstance(module, GatedLayer) else self._layers[index]
        layer.attention = module

    def set_value_dims(self, index: int, qkv: Sequence[nn.Linear], proj: nn.Linear, value_dims: list[int]) -> None:
        if len(qkv) != 3:
            raise ValueError(f"{self._prefix}.layers.{index}.attention has separate q, k and v; got {len(qkv)} "
                             "projections")
        self.set_attention_module(index, HFVariableHeadAttention(self._attention(index), qkv, proj, value_dims))

    def set_activation(self, index: int, act: nn.Module) -> None:
        mlp = self._layers[index].mlp
        if isinstance(mlp.fc2, nn.Identity):
            raise ValueError(f"{self._prefix}.layers.{index}.mlp is merged and has no activation")
        mlp.activation_fn = act

    def prune_embed_dims(self, keep: list[int]) -> None:
        emb = self._embeddings
        emb.patch_embeddings.projection = slice_conv_outputs(emb.patch_embeddings.projection, keep)
        for name in (*_TOKEN_PARAMETERS, "mask_token"):
            slice_parameter(emb, name, 2, keep)
        self._base.layernorm = slice_norm(self._base.layernorm, keep, f"{self._prefix}.layernorm")
        slice_head_inputs(self.classifier_heads(), keep)
        for view in self.blocks():
            layer, path = view.module, view.name
            layer.layernorm_before = slice_norm(layer.layernorm_before, keep, f"{path}.layernorm_before")
            layer.layernorm_after = slice_norm(layer.layernorm_after, keep, f"{path}.layernorm_after")
            if view.attn is not None:
                a = view.attn.module
                a.q_proj, a.k_proj, a.v_proj = view.attn.qkv.select_inputs(keep)
                a.o_proj = slice_linear(a.o_proj, out_idx=keep)
            set_mlp_linears(view.mlp.module, f"{path}.mlp", *view.mlp.select_embed(keep))
        self.model.hf.config.hidden_size = len(keep)

    def save_native(self, directory: str | os.PathLike, *, atol: float = 1e-4) -> float:
        return write_pretrained(self, directory, atol=atol)

    def set_token_op(self, index: int, op: nn.Module) -> None:
        layer = self._layers[index]
        if isinstance(layer, HFTokenBlock):
            layer.tokens = op
            return
        attn, gate = unwrap(layer.attention)
        if attn is None or attn.num_attention_heads == 0:
            raise ValueError(f"{self._prefix}.layers.{index} has no attention head left, so no [CLS] attention or "
                             "keys to reduce its tokens by")
        if gate is not None or (isinstance(layer, HFBlock) and not isinstance(layer.act, nn.Identity)):
            raise ValueError(f"{self._prefix}.layers.{index}: token reduction needs an ungated attention and no "
                             "output activation")
        self._replace_layer(index, HFTokenBlock(layer, op))

    def intermediates(self, images: torch.Tensor, indices: int | Sequence[int] | None = None,
                      norm: bool = False) -> list[torch.Tensor]:
        # Not transformers' hidden states: it records them by hooks on its own layer class, which misses the layers
        # vitprune converts.
        return token_feature_maps(self._layers, self.embed(images), run_layer, indices, self.num_prefix_tokens,
                                  self.grid_size, self._base.layernorm if norm else None)


#: PIL's resampling filters by number, as transformers' image processors record them.
_RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}


def data_config(preprocessing: dict[str, Any] | None) -> dict[str, Any] | None:
    """An image processor's settings as a timm data config: its mean and std, its filter, and its crop (none where
    it resizes straight to the input size, as ViT's processor does)."""
    if not preprocessing or "image_mean" not in preprocessing:
        return None
    config = {"mean": tuple(preprocessing["image_mean"]), "std": tuple(preprocessing["image_std"]),
              "interpolation": _RESAMPLE.get(preprocessing.get("resample"), "bilinear"), "crop_pct": 1.0}
    size, crop = preprocessing.get("size") or {}, preprocessing.get("crop_size") or {}
    if preprocessing.get("do_center_crop") and "height" in size and "height" in crop:
        config["crop_pct"] = crop["height"] / size["height"]
    return config
