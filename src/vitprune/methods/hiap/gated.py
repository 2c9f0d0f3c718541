"""HiAP's gated forward pass (paper Eq. 1-4), installed on a supported ViT by forward hooks.

Per block: the heads' concatenated outputs (the input of ``proj``) are multiplied by the mask
``g_h · d_hj``, which equals gating each head's value dimensions and the head itself (Eq. 3, since
``A·(v ⊙ d) = (A·v) ⊙ d``); the FFN's hidden activations (the input of ``fc2``) by the neuron
gates ``c_k``; and the whole FFN output, ``fc2``'s bias included, by the block gate ``b`` (Eq. 2,
so ``b = 0`` removes the FFN exactly). The attention's output bias stays when every head is
closed, as Eq. 1 gates the heads, not the projection.

Hooks leave the model's modules, state dict and recipe untouched: gating is a training-time view.
"""

from __future__ import annotations

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.errors import VitpruneError
from vitprune.methods.hiap.cost import layer_shapes
from vitprune.methods.hiap.gates import FAMILIES


class GatedForward:
    """The hooks that apply gate values to a model; :meth:`set` the values (per step), :meth:`remove` when done."""

    def __init__(self, model: nn.Module) -> None:
        self.shapes = layer_shapes(model)
        self.values: dict[str, list[torch.Tensor]] | None = None
        self._handles = []
        for view in get_adapter(model).blocks():
            i = view.index
            if view.attn is not None:
                self._handles.append(view.attn.proj.register_forward_pre_hook(
                    lambda _m, args, i=i: (args[0] * self._head_mask(i),)))
            self._handles += [
                view.mlp.fc2.register_forward_pre_hook(lambda _m, args, i=i: (args[0] * self.values["neuron"][i],)),
                view.mlp.module.register_forward_hook(lambda _m, _args, out, i=i: out * self.values["block"][i]),
            ]

    def _head_mask(self, layer: int) -> torch.Tensor:
        if self.values is None:
            raise VitpruneError("set the gate values before running the gated model")
        return (self.values["head"][layer][:, None] * self.values["dim"][layer]).flatten()

    def set(self, values: dict[str, list[torch.Tensor]]) -> None:
        """Use these gate values (a sample, probabilities or hardened gates) from the next forward on."""
        missing = set(FAMILIES) - set(values)
        if missing:
            raise VitpruneError(f"gate values lack the families {sorted(missing)}")
        for layer, shape in enumerate(self.shapes):
            expected = {"head": (shape.heads,), "dim": (shape.heads, shape.head_dim), "block": (),
                        "neuron": (shape.hidden,)}
            for name, size in expected.items():
                if tuple(values[name][layer].shape) != size:
                    raise VitpruneError(f"block {layer}: {name} gates of shape {tuple(values[name][layer].shape)}, "
                                        f"expected {size}")
        self.values = values

    def remove(self) -> None:
        """Take the hooks off: the model is the ungated one again."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
