"""HiAP's gates: a learnable logit per attention head, value dimension, FFN block and FFN neuron.

Training samples binary gates by the Gumbel-sigmoid relaxation with a straight-through estimator:
``ẑ = σ((α + ε)/τ)`` with logistic noise ``ε``, forward value ``1[ẑ > 0.5]``, gradient that of ``ẑ``.
``P(gate = 1) = σ(α)`` whatever ``τ``, so annealing ``τ`` changes only the surrogate gradient.
Evaluation and extraction use the deterministic gates ``1[α > 0]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from vitprune.errors import VitpruneError
from vitprune.layers import straight_through

#: The gate families: (name, level). Macro gates switch whole heads and FFN blocks, micro gates
#: single value dimensions (of a head) and neurons (of an FFN).
FAMILIES = {"head": "macro", "dim": "micro", "block": "macro", "neuron": "micro"}
#: The logit of a gate held open: every logistic sample (clamped at 1e-6, so within ±13.8) stays above 0.
_OPEN = 30.0


@dataclass(frozen=True)
class LayerShape:
    """The prunable shape of one block: tokens ``N``, width ``D``, heads ``H`` of dim ``D_h``, FFN width.

    ``context`` is the tokens each query attends to (``None``: all ``N``; Swin: its window's). A block without
    attention (ConvNeXt) has no heads. ``value_gates=False`` holds every value dimension open, for a family whose
    attention cannot give heads their own value widths (Swin): its heads are gated whole.
    """

    tokens: int
    dim: int
    heads: int
    head_dim: int
    hidden: int
    context: int | None = None
    value_gates: bool = True

    @property
    def attended(self) -> int:
        """Tokens each query attends to."""
        return self.tokens if self.context is None else self.context


def gumbel_sigmoid(logits: torch.Tensor, tau: float, *, hard: bool = True,
                   generator: torch.Generator | None = None, eps: float = 1e-6) -> torch.Tensor:
    """One Gumbel-sigmoid sample per logit: binary forward with a straight-through gradient (``hard``), or soft."""
    if tau <= 0:
        raise VitpruneError(f"temperature must be positive, got {tau}")
    u = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
    u = u.clamp(eps, 1 - eps)
    soft = torch.sigmoid((logits + u.log() - (-u).log1p()) / tau)
    if not hard:
        return soft
    return straight_through((soft > 0.5).to(soft.dtype), soft)


def temperature(step: int, total: int, *, start: float = 2.0, end: float = 0.5) -> float:
    """Exponential annealing ``start · (end/start)^(step/(total−1))``, held at ``end`` afterwards."""
    if total < 2:
        return end
    return start * (end / start) ** (min(step, total - 1) / (total - 1))


class HiAPGates(nn.Module):
    """Gate logits of every block: ``head[l]`` ``(H)``, ``dim[l]`` ``(H, D_h)``, ``block[l]`` ``()``, ``neuron[l]``
    ``(D_ffn)``, all starting at ``init`` (``σ(3) ≈ 0.95``: a nearly dense start); a block without value gates holds
    its ``dim`` logits open and frozen."""

    def __init__(self, shapes: list[LayerShape], init: float = 3.0) -> None:
        super().__init__()
        self.shapes = list(shapes)

        def logits(*size: int, trained: bool = True) -> nn.Parameter:
            return nn.Parameter(torch.full(size, float(init if trained else _OPEN)), requires_grad=trained)

        self.head = nn.ParameterList([logits(s.heads) for s in shapes])
        self.dim = nn.ParameterList([logits(s.heads, s.head_dim, trained=s.value_gates) for s in shapes])
        self.block = nn.ParameterList([logits() for _ in shapes])
        self.neuron = nn.ParameterList([logits(s.hidden) for s in shapes])

    def family(self, name: str) -> nn.ParameterList:
        """The logits of one family (:data:`FAMILIES`)."""
        if name not in FAMILIES:
            raise VitpruneError(f"unknown gate family {name!r} (choose from: {', '.join(FAMILIES)})")
        return getattr(self, name)

    def probabilities(self) -> dict[str, list[torch.Tensor]]:
        """``σ(α)`` of every gate: the probability that a sampled hard gate is 1."""
        return {name: [torch.sigmoid(a) for a in self.family(name)] for name in FAMILIES}

    def sample(self, tau: float, *, hard: bool = True,
               generator: torch.Generator | None = None) -> dict[str, list[torch.Tensor]]:
        """One independent draw per gate, shared by every image of the batch."""
        return {name: [gumbel_sigmoid(a, tau, hard=hard, generator=generator) for a in self.family(name)]
                for name in FAMILIES}

    def hardened(self, threshold: float = 0.0) -> dict[str, list[torch.Tensor]]:
        """The deterministic gates ``1[α > threshold]`` (float); the paper's 0 is ``σ(α) > 0.5``. A head whose value
        dimensions are all closed is closed too: extraction removes it, so it costs nothing (not even its Q and K)."""
        hard = {name: [(a.detach() > threshold).float() for a in self.family(name)] for name in FAMILIES}
        hard["head"] = [head * dim.amax(dim=1) if dim.numel() else head for head, dim in zip(hard["head"], hard["dim"])]
        return hard
