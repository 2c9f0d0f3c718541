"""The modules a Hugging Face ``transformers`` ViT or DeiT classifier is edited into: the wrapper that makes it return
logits (:class:`HFImageClassifier`) and the layers vitprune puts in place of transformers' own where an edit needs a
form transformers has not (a layer without attention, heads of uneven value widths, token reduction).

transformers is imported only where a model is loaded or built (:mod:`vitprune.adapters.hf.hub`); classes are
recognised by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from vitprune.adapters.heads import attend, merge_heads, split_heads
from vitprune.adapters.tokens import TokenHost, TokenOp, TokenState, attention_signal, run_token_blocks
from vitprune.errors import UnsupportedArchitectureError, VitpruneError

#: The transformers classifiers vitprune supports, by class name.
CLASSIFIERS = ("ViTForImageClassification", "DeiTForImageClassification", "DeiTForImageClassificationWithTeacher")
#: Their layers, attentions and MLPs, by class name.
LAYERS = ("ViTLayer", "DeiTLayer")
ATTENTIONS = ("ViTAttention", "DeiTAttention")
MLPS = ("ViTMLP", "DeiTMLP")


def transformers_module():
    """The transformers package; without it, one line saying how to install it."""
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
        if not any(isinstance(layer, HFTokenBlock) for layer in base.layers):
            out = self.hf(pixel_values=images)
            if self.distillation_split and self.training:
                return out.cls_logits, out.distillation_logits
            return out.logits
        # transformers' encoder loop hands one tensor from layer to layer; token reduction also hands on what its
        # operations left (positions, sizes), so the wrapper runs the layers itself, then the classifier as
        # transformers does.
        x = run_token_blocks(base.layers, base.embeddings(images), run_layer)
        x = base.layernorm(x)
        if not self.has_distillation_head:
            return self.hf.classifier(x[:, 0])
        cls_logits, dist_logits = self.hf.cls_classifier(x[:, 0]), self.hf.distillation_classifier(x[:, 1])
        if self.distillation_split and self.training:
            return cls_logits, dist_logits
        return (cls_logits + dist_logits) / 2


def run_layer(layer: nn.Module, x: torch.Tensor, key_bias: torch.Tensor | None) -> torch.Tensor:
    """A layer on tokens whose attention logits take ``key_bias`` ``(B, 1, 1, N)`` (padding, token sizes): additive,
    so that transformers' eager and fused attention read it alike."""
    return layer(x) if key_bias is None else layer(x, key_bias)


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
    out = attend(q, k, v, scale=attn.scaling, bias=mask, dropout=attn.attention_dropout if attn.training else 0.0)
    return attn.o_proj(merge_heads(out, values))


def attention_with_signal(attn: nn.Module, x: torch.Tensor, reads: str,
                          key_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' attention's output and what a token operation ``reads`` of it
    (:func:`~vitprune.adapters.tokens.attention_signal`: the [CLS] row or the keys); ``key_bias`` ``(B, 1, 1, N)``
    adds to the logits."""
    if attn.num_attention_heads == 0:
        raise ValueError("an attention without heads has no [CLS] attention row or keys")
    q, k, v, values = _heads(attn, x)
    return _attend(attn, q, k, v, values, key_bias), attention_signal(reads, q, k, attn.scaling, key_bias)


class HFTokenBlock(TokenHost):
    """A transformers ViT or DeiT layer that runs a token operation (its ``tokens``) between its attention and its
    MLP. The other submodule names are the layer's."""

    def __init__(self, layer: nn.Module, op: TokenOp) -> None:
        super().__init__()
        self.layernorm_before, self.attention = layer.layernorm_before, layer.attention
        self.layernorm_after, self.mlp, self.dropout = layer.layernorm_after, layer.mlp, layer.dropout
        self.tokens = op
        self.train(layer.training)

    def forward(self, x: torch.Tensor, state: TokenState) -> tuple[torch.Tensor, TokenState]:
        out, signal = attention_with_signal(self.attention, self.layernorm_before(x), self.tokens.reads,
                                            state.key_bias(x))
        x = x + self.dropout(out)
        x, state = self.tokens(x, state, signal)
        x = x + self.dropout(self.mlp(self.layernorm_after(x)))
        return x, state
