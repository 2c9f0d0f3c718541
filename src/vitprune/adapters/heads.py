"""Heads of uneven value widths as one tensor: the family-independent reshaping that attention with per-head
value widths (HiAP's extraction) and STAR's relevance pass share."""

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
