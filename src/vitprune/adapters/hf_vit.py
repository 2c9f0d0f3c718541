"""Adapter for Hugging Face ``transformers`` ViT and DeiT image classifiers (the optional extra ``vitprune[hf]``).

A transformers layer is pre-norm like timm's, but its parts differ, and this adapter owns the
differences: separate query, key and value projections (``q_proj``, ``k_proj``, ``v_proj``, then
``o_proj``); no LayerScale; one dropout that both residual branches share; the MLP as ``fc1 →
activation_fn → fc2``; an attention that returns ``(output, attention map)``; the model's output a
``ModelOutput`` rather than logits. vitprune's models return logits, so a transformers classifier
enters wrapped in :class:`HFImageClassifier` (:func:`from_pretrained` and :func:`from_config` wrap).

transformers is imported only where a model is loaded or built, so this module costs nothing
where the extra is not installed; classes are recognised by name.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vitprune.adapters.base import (
    QKV, ActivationRemoval, AttentionRemoval, AttentionView, BlockView, EmbedWidth, FFNWidth, Gates, HeadWidth,
    LRPRelevance, MlpView, OutputActivation, TokenPruning, ValueWidth, ViTAdapter,
)
from vitprune.atomic import atomic_directory
from vitprune.adapters.heads import merge_heads, split_heads
from vitprune.adapters.tokens import TokenSelection, cls_attention_row, run_token_blocks
from vitprune.adapters.channels import (parameters_named, reject, slice_conv_outputs, slice_norm, slice_parameter,
                                         unwrap)
from vitprune.errors import UnsupportedArchitectureError, VitpruneError, first_line
from vitprune.layers import GatedLayer
from vitprune.linear import slice_linear

#: The transformers classifiers this adapter supports, by class name.
CLASSIFIERS = ("ViTForImageClassification", "DeiTForImageClassification", "DeiTForImageClassificationWithTeacher")
_LAYERS = ("ViTLayer", "DeiTLayer")
_ATTENTIONS = ("ViTAttention", "DeiTAttention")
_MLPS = ("ViTMLP", "DeiTMLP")
#: The learned tokens and position embedding of the embeddings module.
_TOKEN_PARAMETERS = ("cls_token", "distillation_token", "position_embeddings")
#: The oldest transformers whose ViT and DeiT layers have the layout above (``q_proj`` … ``mlp.fc2``).
MIN_TRANSFORMERS = "5.24"


def _transformers():
    try:
        import transformers
    except ImportError:
        raise VitpruneError("Hugging Face models need the transformers package: pip install 'vitprune[hf]'") from None
    return transformers


class HFImageClassifier(nn.Module):
    """A transformers image classifier that takes images and returns logits, as every vitprune model does.

    With :attr:`distillation_split` on, a classifier with a distillation head returns ``(class
    logits, distillation logits)`` in training mode, as timm's distilled DeiT does; otherwise
    their mean (transformers' own ``logits``).
    """

    def __init__(self, model: nn.Module, preprocessing: dict[str, Any] | None = None) -> None:
        super().__init__()
        if type(model).__name__ not in CLASSIFIERS:
            raise UnsupportedArchitectureError(f"unsupported architecture: {type(model).__name__} is not one of the "
                                               f"transformers classifiers vitprune supports ({', '.join(CLASSIFIERS)})")
        self.hf = model
        #: The image processor's settings the weights came with (its ``preprocessor_config.json``), if any.
        self.preprocessing = preprocessing
        self.distillation_split = False

    @property
    def has_distillation_head(self) -> bool:
        """Whether the classifier reads the distillation token with a head of its own."""
        return hasattr(self.hf, "distillation_classifier")

    def forward(self, images: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        base = self.hf.base_model
        if not any(isinstance(layer, HFTokenPruneBlock) for layer in base.layers):
            out = self.hf(pixel_values=images)
            if self.distillation_split and self.training:
                return out.cls_logits, out.distillation_logits
            return out.logits
        # transformers' encoder loop hands one tensor from layer to layer; token pruning also hands on each kept
        # token's original position, so the wrapper runs the layers itself, then the classifier as transformers does.
        x = run_token_blocks(base.layers, base.embeddings(images), _run_layer)
        x = base.layernorm(x)
        if not self.has_distillation_head:
            return self.hf.classifier(x[:, 0])
        cls_logits, dist_logits = self.hf.cls_classifier(x[:, 0]), self.hf.distillation_classifier(x[:, 1])
        if self.distillation_split and self.training:
            return cls_logits, dist_logits
        return (cls_logits + dist_logits) / 2


def _run_layer(layer: nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """A layer on tokens where ``mask`` ``(B, N)`` is ``False`` at padding no token may attend to."""
    if mask is None:
        return layer(x)
    # Additive, so that transformers' eager and fused attention read it alike.
    additive = torch.zeros(mask.shape, dtype=x.dtype, device=x.device).masked_fill(~mask, float("-inf"))
    return layer(x, additive[:, None, None, :])


class HFBlock(nn.Module):
    """A transformers ViT or DeiT layer in a form its own class cannot express.

    The attention may be gone (``attention is None``: the branch is ``layernorm_before(x)`` (HetDPT's
    identity), or nothing when that norm is ``None`` too) or wrapped in a gate, and ``act`` runs on
    the output. Submodule names are the layer's, so the state-dict keys of the surviving parts do
    not change.
    """

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layernorm_before, self.attention = layer.layernorm_before, layer.attention
        self.layernorm_after, self.mlp, self.dropout = layer.layernorm_after, layer.mlp, layer.dropout
        self.act = nn.Identity()
        self.train(layer.training)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **kwargs: Any) -> torch.Tensor:
        x = hidden_states
        if self.attention is not None:
            out = self.attention(self.layernorm_before(x), attention_mask, **kwargs)
            x = x + self.dropout(out[0] if isinstance(out, tuple) else out)
        elif self.layernorm_before is not None:
            x = x + self.dropout(self.layernorm_before(x))
        x = x + self.dropout(self.mlp(self.layernorm_after(x)))
        return self.act(x)


class HFVariableHeadAttention(nn.Module):
    """transformers' ViT/DeiT attention whose heads share one query/key width but keep their own number of value
    dimensions (HiAP's extraction): ``v_proj`` holds the kept value rows head by head, ``o_proj`` reads them.

    As timm's :class:`~vitprune.adapters.timm_blocks.VariableHeadAttention`: one fused kernel over values
    zero-padded to the query width, cut back after; the scale stays the original. With no head left the branch
    is ``o_proj``'s bias. Returns ``(output, None)``, as transformers' attention returns its output and map.
    """

    def __init__(self, attn: nn.Module, qkv: Sequence[nn.Linear], proj: nn.Linear, value_dims: list[int]) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = qkv
        self.o_proj = proj
        self.num_attention_heads, self.head_dim, self.scaling = len(value_dims), attn.head_dim, attn.scaling
        self.attention_dropout = attn.attention_dropout
        self.value_dims = list(value_dims)
        qk = self.num_attention_heads * self.head_dim
        if (self.q_proj.out_features, self.k_proj.out_features, self.v_proj.out_features, proj.in_features) != \
                (qk, qk, sum(value_dims), sum(value_dims)):
            raise ValueError(f"projections do not fit {self.num_attention_heads} heads of query/key width "
                             f"{self.head_dim} and value widths {value_dims}")
        self.train(attn.training)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **kwargs: Any) -> tuple[torch.Tensor, None]:
        if self.num_attention_heads == 0:
            b, n, _ = hidden_states.shape
            return self.o_proj(hidden_states.new_zeros(b, n, 0)), None
        return _attend(self, *_heads(self, hidden_states), attention_mask), None


def _heads(attn: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
    """Queries and keys ``(B, H, N, head_dim)``, the values zero-padded to that width, and each head's value width."""
    b, n, _ = x.shape
    values = list(attn.value_dims) if isinstance(attn, HFVariableHeadAttention) else \
        [attn.head_dim] * attn.num_attention_heads
    q, k = (lin(x).reshape(b, n, -1, attn.head_dim).transpose(1, 2) for lin in (attn.q_proj, attn.k_proj))
    return q, k, split_heads(attn.v_proj(x), values, attn.head_dim), values


def _attend(attn: nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, values: list[int],
            mask: torch.Tensor | None) -> torch.Tensor:
    """All heads in one fused kernel, cut back to their value widths, then ``o_proj``."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attn.scaling,
                                         dropout_p=attn.attention_dropout if attn.training else 0.0)
    return attn.o_proj(merge_heads(out, values))


def attention_with_cls_row(attn: nn.Module, x: torch.Tensor,
                           key_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' attention's output, and the first ([CLS]) token's attention probabilities over all tokens
    ``(B, H, N)``; ``key_mask`` ``(B, N)`` is ``False`` at padding."""
    if attn.num_attention_heads == 0:
        raise ValueError("an attention without heads has no [CLS] attention row")
    q, k, v, values = _heads(attn, x)
    mask = None if key_mask is None else key_mask[:, None, None, :]
    return _attend(attn, q, k, v, values, mask), cls_attention_row(q, k, attn.scaling, key_mask)


class HFTokenPruneBlock(TokenSelection):
    """A transformers ViT or DeiT layer that keeps the prefix tokens and the top-scoring patch tokens before its MLP
    (:class:`~vitprune.adapters.tokens.TokenSelection` says which). Submodule names are the layer's."""

    def __init__(self, layer: nn.Module, *, num_prefix_tokens: int, num_patches: int, keep_rate: float = 1.0,
                 alpha: float = 1.0, adaptive: bool = False) -> None:
        super().__init__(num_prefix_tokens=num_prefix_tokens, num_patches=num_patches, keep_rate=keep_rate,
                         alpha=alpha, adaptive=adaptive)
        self.layernorm_before, self.attention = layer.layernorm_before, layer.attention
        self.layernorm_after, self.mlp, self.dropout = layer.layernorm_after, layer.mlp, layer.dropout
        self.train(layer.training)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None,
                valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        out, cls_row = attention_with_cls_row(self.attention, self.layernorm_before(x), self.key_mask(x, valid))
        x = x + self.dropout(out)
        x, positions, valid = self.select(x, positions, valid, cls_row)
        x = x + self.dropout(self.mlp(self.layernorm_after(x)))
        return x, positions, valid


def _check_layer(path: str, layer: nn.Module) -> None:
    if type(layer).__name__ not in _LAYERS and not isinstance(layer, (HFBlock, HFTokenPruneBlock)):
        raise reject(path, layer, f"only transformers' {' and '.join(_LAYERS)} are supported")
    attn, _ = unwrap(layer.attention)
    if attn is not None and not _is_attention(attn):
        raise reject(f"{path}.attention", attn, "not transformers' ViT or DeiT attention; transformers older than "
                                                f"{MIN_TRANSFORMERS} lay it out differently")
    mlp = layer.mlp
    if type(mlp).__name__ not in _MLPS:
        raise reject(f"{path}.mlp", mlp, "not transformers' ViT or DeiT MLP")
    if not isinstance(mlp.fc1, nn.Linear) or not isinstance(mlp.fc2, (nn.Linear, nn.Identity)):
        raise reject(f"{path}.mlp", mlp, "fc1 and fc2 must be nn.Linear, or fc2 the identity after a merge")


def _is_attention(module: nn.Module) -> bool:
    return type(module).__name__ in _ATTENTIONS or isinstance(module, HFVariableHeadAttention)


class HFViTAdapter(ViTAdapter, AttentionRemoval, ActivationRemoval, OutputActivation, FFNWidth, HeadWidth, ValueWidth,
                   EmbedWidth, TokenPruning, LRPRelevance, Gates):
    """transformers' ``ViTForImageClassification``, ``DeiTForImageClassification`` and
    ``DeiTForImageClassificationWithTeacher``, wrapped in :class:`HFImageClassifier`.

    Edits keep transformers' own modules where they can (fewer heads, narrower head dims, fewer
    neurons, a merged MLP as ``fc1`` with identity activation and ``fc2``); a layer that loses its
    attention, gets an output activation or a gated attention becomes an :class:`HFBlock`.
    """

    family = "hf-vit"
    family_modules = ("transformers", "vitprune.adapters.hf_vit")
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
            token_keep_rate=layer.keep_rate if isinstance(layer, HFTokenPruneBlock) else None)

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
        heads = [hf.cls_classifier, hf.distillation_classifier] if self._teacher else [hf.classifier]
        return [h for h in heads if isinstance(h, nn.Linear)]

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
        if isinstance(layer, HFTokenPruneBlock):
            raise ValueError(f"{self._prefix}.layers.{index} prunes tokens; depth surgery on such a layer is not "
                             "supported")
        if not isinstance(layer, HFBlock):
            layer = self._layers[index] = HFBlock(layer)
        return layer

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
        mlp = self._layers[index].mlp
        merged = isinstance(mlp.fc2, nn.Identity)
        if (fc2 is None) != merged:
            raise ValueError(f"{self._prefix}.layers.{index}.mlp: " + (
                "is merged, so it takes a single Linear" if merged else "is not merged; merge it with merge_mlp"))
        if fc2 is not None and fc1.out_features != fc2.in_features:
            raise ValueError(f"{self._prefix}.layers.{index}.mlp: fc1 gives {fc1.out_features} features, fc2 takes "
                             f"{fc2.in_features}")
        mlp.fc1 = fc1
        if fc2 is not None:
            mlp.fc2 = fc2

    def merge_mlp(self, index: int, linear: nn.Linear) -> None:
        mlp = self._layers[index].mlp
        mlp.fc1, mlp.activation_fn, mlp.fc2 = linear, nn.Identity(), nn.Identity()

    def remove_attention(self, index: int, norm: nn.Module | None) -> None:
        self._attention(index)
        layer = self._block(index)
        layer.attention, layer.layernorm_before = None, norm

    def set_norm(self, index: int, position: int, norm: nn.Module) -> None:
        if position not in (1, 2):
            raise ValueError(f"norm position must be 1 or 2, got {position}")
        name = ("layernorm_before", "layernorm_after")[position - 1]
        layer = self._layers[index]
        if getattr(layer, name) is None:
            raise ValueError(f"{self._prefix}.layers.{index} has no {name}")
        setattr(layer, name, norm)

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
        for head in self.classifier_heads():
            slice_parameter(head, "weight", 1, keep)
            head.in_features = len(keep)
        for view in self.blocks():
            layer, path = view.module, view.name
            layer.layernorm_before = slice_norm(layer.layernorm_before, keep, f"{path}.layernorm_before")
            layer.layernorm_after = slice_norm(layer.layernorm_after, keep, f"{path}.layernorm_after")
            if view.attn is not None:
                a = view.attn.module
                a.q_proj, a.k_proj, a.v_proj = view.attn.qkv.select_inputs(keep)
                a.o_proj = slice_linear(a.o_proj, out_idx=keep)
            mlp = view.mlp
            if mlp.merged:
                mlp.module.fc1 = slice_linear(mlp.fc1, out_idx=keep, in_idx=keep)
            else:
                mlp.module.fc1 = slice_linear(mlp.fc1, in_idx=keep)
                mlp.module.fc2 = slice_linear(mlp.fc2, out_idx=keep)
        self.model.hf.config.hidden_size = len(keep)

    def save_native(self, directory: str | os.PathLike, *, atol: float = 1e-4) -> float:
        return save_pretrained(self.model, directory, atol=atol)

    def set_token_pruning(self, index: int, keep_rate: float, alpha: float, adaptive: bool = False) -> None:
        layer = self._layers[index]
        if isinstance(layer, HFTokenPruneBlock):
            layer.keep_rate, layer.alpha, layer.adaptive = keep_rate, alpha, adaptive
            return
        attn, gate = unwrap(layer.attention)
        if attn is None or attn.num_attention_heads == 0:
            raise ValueError(f"{self._prefix}.layers.{index} has no attention head left, so no [CLS] attention to "
                             "rank its patch tokens by: it cannot prune tokens")
        if gate is not None or (isinstance(layer, HFBlock) and not isinstance(layer.act, nn.Identity)):
            raise ValueError(f"{self._prefix}.layers.{index}: token pruning needs an ungated attention and no output "
                             "activation")
        self._layers[index] = HFTokenPruneBlock(layer, num_prefix_tokens=self.num_prefix_tokens,
                                                num_patches=self.num_patches, keep_rate=keep_rate, alpha=alpha,
                                                adaptive=adaptive)

    def set_token_prior(self, index: int, prior: torch.Tensor) -> None:
        layer = self._layers[index]
        if not isinstance(layer, HFTokenPruneBlock):
            raise VitpruneError(f"block {index} does not prune tokens; apply prune_tokens first")
        if prior.shape != layer.inter.shape:
            raise VitpruneError(f"block {index}: a prior of shape {tuple(prior.shape)} for {layer.inter.numel()} "
                                "patches")
        with torch.no_grad():
            layer.inter.copy_(prior.to(layer.inter))


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


def from_config(architecture: str, config: dict[str, Any],
                preprocessing: dict[str, Any] | None = None) -> HFImageClassifier:
    """A randomly initialised transformers classifier ``architecture`` (a class name) from a config dict, wrapped
    (``preprocessing``: its image processor's settings, see :class:`HFImageClassifier`)."""
    transformers = _transformers()
    if architecture not in CLASSIFIERS:
        raise UnsupportedArchitectureError(f"unsupported architecture: {architecture} (vitprune supports "
                                           f"{', '.join(CLASSIFIERS)})")
    cls = getattr(transformers, architecture)
    return HFImageClassifier(cls(cls.config_class.from_dict(config)), preprocessing)


def load_config(source: str, *, local_files_only: bool) -> tuple[str, dict[str, Any]]:
    """The classifier class name and config dict of a ``save_pretrained`` directory or hub id (no weights)."""
    transformers = _transformers()
    try:
        with _quiet_hub():
            config = transformers.AutoConfig.from_pretrained(source, local_files_only=local_files_only)
    except Exception as exc:  # hub, HTTP, offline and parse errors have no common base class
        hint = "" if local_files_only else "; without network, save the model with save_pretrained where there is " \
                                           "network and pass that directory"
        raise VitpruneError(f"cannot read the Hugging Face config of {source} ({type(exc).__name__}: "
                            f"{first_line(exc)}){hint}") from None
    architecture = (config.architectures or [""])[0]
    if architecture not in CLASSIFIERS:
        raise UnsupportedArchitectureError(f"unsupported architecture: {source} is a {architecture or 'model'} "
                                           f"(vitprune supports {', '.join(CLASSIFIERS)})")
    return architecture, config.to_dict()


def from_pretrained(source: str, *, local_files_only: bool) -> HFImageClassifier:
    """The classifier a ``save_pretrained`` directory or hub id holds, with its weights, wrapped."""
    architecture, _ = load_config(source, local_files_only=local_files_only)
    transformers = _transformers()
    transformers.utils.logging.disable_progress_bar()  # vitprune shows its own progress
    try:
        model = getattr(transformers, architecture).from_pretrained(source, local_files_only=local_files_only)
    except Exception as exc:  # as in load_config
        raise VitpruneError(f"cannot load the Hugging Face weights of {source} ({type(exc).__name__}: "
                            f"{first_line(exc)})") from None
    # transformers maps the weights file into memory at whatever offsets it stores them; unaligned tensors take other
    # kernels than the same weights loaded anywhere else, which changes the last bits of the outputs. Own copies
    # make a model equal, bit for bit, to itself saved and loaded.
    with torch.no_grad():
        for tensor in (*model.parameters(), *model.buffers()):
            tensor.data = tensor.data.clone()
    return HFImageClassifier(model.eval(), _preprocessing(source, local_files_only))


def _preprocessing(source: str, local_files_only: bool) -> dict[str, Any] | None:
    """The ``preprocessor_config.json`` beside the weights, if there is one."""
    try:
        with _quiet_hub():
            path = _transformers().utils.cached_file(source, "preprocessor_config.json",
                                                     local_files_only=local_files_only,
                                                     _raise_exceptions_for_missing_entries=False)
    except Exception:  # as in load_config; the weights loaded, so a missing processor file is no error
        return None
    return json.loads(Path(path).read_text()) if path else None


def save_pretrained(model: HFImageClassifier, directory: str | os.PathLike, *, atol: float = 1e-4) -> float:
    """Write a pruned classifier as a plain transformers directory (``from_pretrained`` loads it, without vitprune);
    returns the largest difference between the reloaded model's logits and ``model``'s on random images.

    transformers' config describes one shape for every layer: width, heads, head dim and FFN width. A model whose
    layers all still have attention and activation and share those widths (uniform width pruning) fits; one with
    removed sublayers, merged MLPs or per-layer widths does not, and is refused in one line that says why. The
    directory (with the image processor's settings, if the model has them) is written under a temporary name,
    reloaded and compared, and renamed only if the logits agree within ``atol``.
    """
    adapter = HFViTAdapter(model)
    views = adapter.blocks()
    why = []
    if any(v.attn is None or not v.mlp.has_activation or type(v.module).__name__ not in _LAYERS for v in views):
        why.append("layers without attention or activation, or that prune tokens (depth or token pruning)")
    shapes = sorted({(v.attn.num_heads, v.attn.head_dim, v.mlp.hidden_features) for v in views if v.attn is not None
                     and not v.mlp.merged})
    if len(shapes) > 1 or any(v.attn is not None and v.attn.value_dims is not None for v in views):
        # VBP, width pruning and HiAP rank across layers, so their models land here; say so, lest a user look for
        # a setting that would make the widths uniform.
        why.append(f"layers of different widths ((heads, head dim, FFN) {', '.join(map(str, shapes))}; VBP, width "
                   "pruning and HiAP rank across layers and leave each its own width)")
    if why:
        raise VitpruneError(f"transformers cannot describe {' or '.join(why)} in a config: save the model with "
                            "vitprune (recipe and weights) or export it to ONNX")
    heads, head_dim, hidden = shapes[0]
    hf = copy.deepcopy(model.hf).cpu().eval()
    config = hf.config
    config.hidden_size, config.num_attention_heads, config.intermediate_size = adapter.embed_dim, heads, hidden
    config.head_dim = head_dim  # transformers' ViT and DeiT attention read it where hidden_size / heads no longer is
    images = torch.randn(2, *adapter.input_size, generator=torch.Generator().manual_seed(0))
    with atomic_directory(directory) as tmp:
        hf.save_pretrained(tmp)
        if model.preprocessing:
            (tmp / "preprocessor_config.json").write_text(json.dumps(model.preprocessing, indent=2))
        reloaded = getattr(_transformers(), type(hf).__name__).from_pretrained(tmp).eval()
        with torch.no_grad():
            diff = (reloaded(pixel_values=images).logits - hf(pixel_values=images).logits).abs().max().item()
        if not diff <= atol:
            raise VitpruneError(f"the written directory's logits differ from the model's by {diff:.2e} (> {atol:.0e})")
    return diff


def config_dict(model: HFImageClassifier) -> tuple[str, dict[str, Any]]:
    """The wrapped classifier's class name and the keyword arguments :func:`from_config` rebuilds it from (its config
    as a JSON-ready dict, and its preprocessing)."""
    return type(model.hf).__name__, {"config": model.hf.config.to_dict(), "preprocessing": model.preprocessing}


@contextmanager
def _quiet_hub():
    """The hub client logs each failed request before raising; the error vitprune raises says it once."""
    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)
