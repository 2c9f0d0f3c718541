"""The masked (gated) form of depth surgery: HetDPT Eq. 2 with learnable importance (Eq. 6).

Every attention sublayer and every MLP activation gets a :class:`~vitprune.layers.Gate`: with mask
``m`` the layer computes ``m * f(u) + (1 - m) * identity(u)``. A gated model with some masks at 0
computes what :func:`~vitprune.surgery.depth.prune_depth` builds physically, which
:func:`prune_gated` does and the tests check. Gates are training scaffolding, not recipe edits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.errors import VitpruneError
from vitprune.layers import Gate, GatedLayer, RemovedActivation
from vitprune.surgery.depth import ATTENTION_IDENTITIES, prune_depth

#: What a gated-out attention leaves inside its branch, per identity reading: its input (LN1(x)), or nothing.
_GATED_IDENTITY = {"norm": None, "skip": torch.zeros_like}


@dataclass
class DepthGates:
    """The gates of one model, by block index, and the options they were installed with."""

    attention: dict[int, Gate] = field(default_factory=dict)
    activation: dict[int, Gate] = field(default_factory=dict)
    identity: str = "norm"
    output_gelu: bool = False

    def set_masks(self, attention: list[int] | tuple[int, ...] = (),
                  activation: list[int] | tuple[int, ...] = ()) -> None:
        """Mask out exactly the given layers (every other gated layer is kept)."""
        for name, gates, removed in (("attention", self.attention, attention),
                                     ("activation", self.activation, activation)):
            removed = set(removed)
            missing = sorted(removed - set(gates))
            if missing:
                raise VitpruneError(f"block {missing[0]} has no gated {name} layer")
            for index, gate in gates.items():
                gate.set(index not in removed)

    def removed(self) -> tuple[list[int], list[int]]:
        """Blocks whose attention, and whose activation, are masked out."""
        return ([i for i, g in self.attention.items() if not g.kept],
                [i for i, g in self.activation.items() if not g.kept])

    def importance(self) -> dict[str, dict[int, float]]:
        """The learned importance of every gated layer, by type and block."""
        return {"attention": {i: g.importance.item() for i, g in self.attention.items()},
                "activation": {i: g.importance.item() for i, g in self.activation.items()}}

    def parameters(self) -> list[nn.Parameter]:
        """The importance parameters (to give an optimiser, e.g. without weight decay)."""
        return [g.importance for g in (*self.attention.values(), *self.activation.values())]


def add_depth_gates(model: nn.Module, *, identity: str = "norm", output_gelu: bool = False) -> DepthGates:
    """Wrap every remaining attention sublayer and MLP activation of ``model`` in a gate (all masks 1).

    ``identity`` and ``output_gelu`` mean what they mean for :func:`~vitprune.surgery.depth.prune_depth`.
    """
    if identity not in ATTENTION_IDENTITIES:
        raise VitpruneError(f"unknown attention identity {identity!r} "
                            f"(choose from: {', '.join(ATTENTION_IDENTITIES)})")
    adapter = get_adapter(model)
    gates = DepthGates(identity=identity, output_gelu=output_gelu)
    for view in adapter.blocks():
        if (view.attn is not None and view.attn.gate is not None) or view.mlp.gate is not None:
            raise VitpruneError(f"{view.name} is gated already")
        param = next(view.module.parameters())
        if view.attn is not None:
            gate = gates.attention[view.index] = Gate().to(param.device, param.dtype)
            adapter.set_attention_module(view.index, GatedLayer(view.attn.module, gate, _GATED_IDENTITY[identity]))
        if view.mlp.has_activation:
            gate = gates.activation[view.index] = Gate().to(param.device, param.dtype)
            adapter.set_activation(view.index, GatedLayer(view.mlp.act, gate))
        block_gates = [g[view.index] for g in (gates.attention, gates.activation) if view.index in g]
        if output_gelu and block_gates:
            adapter.set_output_activation(view.index, RemovedActivation(nn.GELU(), block_gates))
    return gates


def remove_depth_gates(model: nn.Module) -> None:
    """Unwrap every gate, keeping every layer whatever its mask."""
    adapter = get_adapter(model)
    for view in adapter.blocks():
        if view.attn is not None and view.attn.gate is not None:
            adapter.set_attention_module(view.index, view.attn.module)
        if view.mlp.gate is not None:
            adapter.set_activation(view.index, view.mlp.act)
        if isinstance(view.act, RemovedActivation):
            adapter.set_output_activation(view.index, nn.Identity())


def prune_gated(model: nn.Module, gates: DepthGates, *, fold_norm: bool = False) -> tuple[list[int], list[int]]:
    """Turn the masks into structure: remove the gates, then every masked-out layer (recorded as recipe edits).

    Returns the blocks whose attention and whose activation were removed.
    """
    attention, activation = gates.removed()
    remove_depth_gates(model)
    prune_depth(model, attention, activation, identity=gates.identity, fold_norm=fold_norm,
                output_gelu=gates.output_gelu)
    return attention, activation
