"""Exact operations on ``nn.Linear`` layers (slice, merge, fold), shared by adapters and every surgery."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.utils import skip_init


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
    return _linear_like(linear, weight, bias)


def check_indices(indices: Sequence[int], size: int, what: str, *, allow_empty: bool = False) -> list[int]:
    """Validate kept indices: unique, sorted, within ``range(size)``, and non-empty unless ``allow_empty``."""
    idx = [int(i) for i in indices]
    if not idx and not allow_empty:
        raise ValueError(f"{what}: at least one index must be kept")
    if sorted(set(idx)) != idx:
        raise ValueError(f"{what}: kept indices must be unique and sorted")
    if idx and (idx[0] < 0 or idx[-1] >= size):
        raise ValueError(f"{what}: kept indices must lie in [0, {size})")
    return idx


def merge_linears(first: nn.Linear, second: nn.Linear, scale: torch.Tensor | None = None) -> nn.Linear:
    """One Linear equal to ``scale * second(first(x))`` (``scale`` per output feature, e.g. LayerScale).

    ``W = diag(scale) W2 W1`` and ``b = scale * (W2 b1 + b2)``, computed in float64 and cast back,
    so the merged layer matches the pair to float rounding.
    """
    w1, w2 = first.weight.detach().double(), second.weight.detach().double()
    weight = w2 @ w1
    bias = torch.zeros(w2.shape[0], dtype=torch.float64, device=w2.device)
    if first.bias is not None:
        bias = bias + w2 @ first.bias.detach().double()
    if second.bias is not None:
        bias = bias + second.bias.detach().double()
    if scale is not None:
        scale = scale.detach().double()
        weight, bias = scale[:, None] * weight, scale * bias
    return _linear_like(first, weight, bias)


def fold_input_affine(linear: nn.Linear, scale: torch.Tensor, shift: torch.Tensor | None) -> nn.Linear:
    """One Linear equal to ``linear(scale * x + shift)``: ``W diag(scale)`` and ``W shift + b``."""
    weight = linear.weight.detach().double()
    bias = linear.bias.detach().double() if linear.bias is not None else torch.zeros(weight.shape[0],
                                                                                     dtype=torch.float64,
                                                                                     device=weight.device)
    if shift is not None:
        bias = bias + weight @ shift.detach().double()
    return _linear_like(linear, weight * scale.detach().double()[None, :], bias)


def _linear_like(template: nn.Linear, weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
    """A Linear holding ``weight``/``bias`` (cast to ``template``'s dtype) with its device and training flags."""
    dtype = template.weight.dtype
    # The values are overwritten at once; torch still warns that a zero-width layer has nothing to initialise.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Initializing zero-element tensors is a no-op")
        new = skip_init(nn.Linear, weight.shape[1], weight.shape[0], bias=bias is not None, device=weight.device,
                        dtype=dtype)
    with torch.no_grad():
        new.weight.copy_(weight.to(dtype))
        if bias is not None:
            new.bias.copy_(bias.to(dtype))
    new.train(template.training)
    new.weight.requires_grad_(template.weight.requires_grad)
    return new
