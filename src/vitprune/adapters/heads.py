"""Heads of uneven value widths as one tensor: the family-independent reshaping that attention with per-head
value widths (HiAP's extraction) and STAR's relevance pass share; and the attention kernel vitprune's own attention
paths call."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def split_heads(values: torch.Tensor, widths: list[int], head_dim: int) -> torch.Tensor:
    """Concatenated head values ``(B, N, Σ widths)`` as ``(B, H, N, head_dim)``, each zero-padded to ``head_dim``."""
    b, n, _ = values.shape
    if len(set(widths)) == 1:
        v = F.pad(values.reshape(b, n, len(widths), widths[0]), (0, head_dim - widths[0]))
    else:
        v = torch.stack([F.pad(part, (0, head_dim - w)) for part, w in zip(values.split(widths, -1), widths)], 2)
    return v.transpose(1, 2)


def merge_heads(heads: torch.Tensor, widths: list[int]) -> torch.Tensor:
    """The inverse of :func:`split_heads`: ``(B, H, N, head_dim)`` cut back to ``(B, N, Σ widths)``."""
    b, _, n, _ = heads.shape
    heads = heads.transpose(1, 2)
    if len(set(widths)) == 1:
        return heads[..., :widths[0]].reshape(b, n, sum(widths))
    return torch.cat([heads[:, :, h, :w] for h, w in enumerate(widths)], -1)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None,
           bias: torch.Tensor | None = None, dropout: float = 0.0, is_causal: bool = False) -> torch.Tensor:
    """``softmax(q·kᵀ·scale + bias)·v`` over ``(B, H, N, d)`` heads: the fused kernel, or, while torch exports a model
    with a bias (token reduction's padding or sizes), the explicit form, which its ONNX exporter can decompose under a
    dynamic batch."""
    if bias is None or not torch.compiler.is_exporting():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout, is_causal=is_causal,
                                              scale=scale)
    scores = (q * (q.shape[-1] ** -0.5 if scale is None else scale)) @ k.transpose(-2, -1) + bias
    return F.dropout(scores.softmax(dim=-1), dropout) @ v
