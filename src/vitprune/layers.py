"""Small modules that surgery installs into a model: masks with learnable importance, and their wrappers.

They hold no knowledge of any model family; adapters place them, and recognise them when they look
at a model again.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class _StraightThrough(torch.autograd.Function):
    """Returns the value unchanged; its gradient goes to the surrogate instead."""

    @staticmethod
    def forward(ctx, mask: torch.Tensor, importance: torch.Tensor) -> torch.Tensor:
        return mask.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[None, torch.Tensor]:
        return None, grad


def straight_through(value: torch.Tensor, surrogate: torch.Tensor) -> torch.Tensor:
    """Exactly ``value`` in the forward pass; in the backward pass its gradient goes to ``surrogate``.

    The straight-through estimator of HetDPT's masks (Eq. 6) and HiAP's hard Gumbel-sigmoid gates.
    Unlike ``value + surrogate - surrogate.detach()`` the forward value carries no rounding error.
    """
    return _StraightThrough.apply(value, surrogate)


class Gate(nn.Module):
    """A binary mask ``m`` (a buffer, 1 = keep) with a learnable scalar importance.

    The forward value is exactly ``m``; in the backward pass ``dloss/dm`` is handed to
    ``importance`` (identity straight-through estimator): under SGD the importance accumulates a
    first-order estimate of how much the loss would rise if the layer were removed; under AdamW
    (HetDPT's) it counts the steps whose gradient favoured keeping it, each weighted by the learning rate.
    """

    def __init__(self, importance: float = 0.0) -> None:
        super().__init__()
        self.register_buffer("mask", torch.ones(()))
        self.importance = nn.Parameter(torch.tensor(float(importance)))

    @property
    def kept(self) -> bool:
        """Whether the mask keeps the layer."""
        return bool(self.mask.item() == 1.0)

    def set(self, keep: bool) -> None:
        """Keep (1) or remove (0) the gated layer."""
        self.mask.fill_(1.0 if keep else 0.0)

    def forward(self) -> torch.Tensor:
        return straight_through(self.mask.to(self.importance.dtype), self.importance)


class GatedLayer(nn.Module):
    """``m * inner(x, ...) + (1 - m) * identity(x)`` for a :class:`Gate` ``m`` (HetDPT Eq. 2).

    ``identity`` is what the layer becomes when removed, as a function of its input: ``x`` itself
    by default; ``torch.zeros_like`` drops a residual branch entirely. A layer that returns a tuple
    (transformers' attention returns its output and its attention map) is gated on the first item,
    and the gated layer returns that tensor alone.
    """

    def __init__(self, inner: nn.Module, gate: Gate,
                 identity: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.gate = gate
        self._identity = identity

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        m = self.gate()
        out = self.inner(x, *args, **kwargs)
        if isinstance(out, tuple):
            out = out[0]
        rest = x if self._identity is None else self._identity(x)
        return m * out + (1 - m) * rest


class RemovedActivation(nn.Module):
    """``act`` applied only once every one of ``gates`` is 0, mixed so that each gate gets a gradient.

    This is the reference HetDPT code's extra activation on the output of a block that lost both
    its attention and its GELU; vitprune offers it only as a compatibility option.
    """

    def __init__(self, act: nn.Module, gates: list[Gate]) -> None:
        super().__init__()
        self.act = act
        # A plain attribute, not submodules: each gate belongs to the layer it gates.
        self._gates = tuple(gates)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        removed = torch.ones((), dtype=x.dtype, device=x.device)
        for gate in self._gates:
            removed = removed * (1 - gate())
        return removed * self.act(x) + (1 - removed) * x
