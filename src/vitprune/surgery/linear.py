"""Exact operations on ``nn.Linear`` layers, shared by every surgery."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def slice_linear(linear: nn.Linear, *, out_idx: Sequence[int] | None = None,
                 in_idx: Sequence[int] | None = None) -> nn.Linear:
    """A new Linear keeping only the given output rows and/or input columns (weights copied, same dtype/device)."""
    weight = linear.weight.detach()
    bias = linear.bias.detach() if linear.bias is not None else None
    if out_idx is not None:
        rows = torch.as_tensor(list(out_idx), dtype=torch.long, device=weight.device)
        weight = weight.index_select(0, rows)
        bias = bias.index_select(0, rows) if bias is not None else None
    if in_idx is not None:
        cols = torch.as_tensor(list(in_idx), dtype=torch.long, device=weight.device)
        weight = weight.index_select(1, cols)
    new = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        new.weight.copy_(weight)
        if bias is not None:
            new.bias.copy_(bias)
    new.train(linear.training)
    new.weight.requires_grad_(linear.weight.requires_grad)
    return new


def check_indices(indices: Sequence[int], size: int, what: str) -> list[int]:
    """Validate kept indices: non-empty, unique, sorted, within ``range(size)``."""
    idx = [int(i) for i in indices]
    if not idx:
        raise ValueError(f"{what}: at least one index must be kept")
    if sorted(set(idx)) != idx:
        raise ValueError(f"{what}: kept indices must be unique and sorted")
    if idx[0] < 0 or idx[-1] >= size:
        raise ValueError(f"{what}: kept indices must lie in [0, {size})")
    return idx
