"""HiAP's extraction: harden the gates and cut the physically smaller dense model out of the gated one.

Each block's hardened gates become recipe edits, so the result saves, loads and composes:

* heads: a head survives if its gate is open and it keeps a value dimension. All heads whole ->
  nothing; whole heads only -> ``prune_heads`` (timm's attention, fused kernel kept); otherwise
  ``prune_attention_dims`` (per-head value widths; with no head left the branch is ``proj``'s bias,
  exactly as the gated model keeps it). A family without value gates (Swin) needs a head left;
  a block without attention (ConvNeXt) has none to cut;
* FFN: a closed block keeps no neuron and its ``fc2`` bias is zeroed (the block gate multiplies
  that bias too); an open block keeps its open neurons (``prune_mlp_neurons``), and with none open
  it outputs ``fc2``'s bias, as the gated model does.
"""

from __future__ import annotations

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.errors import VitpruneError
from vitprune.methods.hiap.cost import layer_shapes
from vitprune.methods.hiap.gates import HiAPGates
from vitprune.surgery import prune_attention_dims, prune_heads, prune_mlp_neurons


def extract(model: nn.Module, gates: HiAPGates, threshold: float = 0.0) -> list[dict]:
    """Apply ``gates``' decisions hardened at ``threshold`` to ``model`` in place; returns what each block keeps."""
    hard = gates.hardened(threshold)
    kept = []
    for layer, shape in enumerate(layer_shapes(model)):
        head, dim = hard["head"][layer] > 0, hard["dim"][layer] > 0
        heads = [h for h in range(shape.heads) if head[h] and dim[h].any()]
        dims = [dim[h].nonzero().flatten().tolist() for h in heads]
        whole = all(len(d) == shape.head_dim for d in dims)
        if shape.heads and not heads and not shape.value_gates:
            raise VitpruneError(f"HiAP closed every head of block {layer}, and {get_adapter(model).family} models "
                                "cannot run an attention without heads: raise min_heads or lower the MAC pressure")
        if not (whole and len(heads) == shape.heads):
            if whole and heads:
                prune_heads(model, layer, heads)
            else:
                prune_attention_dims(model, layer, heads, dims)
        neurons = (hard["neuron"][layer] > 0).nonzero().flatten().tolist()
        if not hard["block"][layer]:
            neurons = []
            prune_mlp_neurons(model, layer, [])
            with torch.no_grad():
                get_adapter(model).block(layer).mlp.fc2.bias.zero_()
        elif len(neurons) < shape.hidden:
            prune_mlp_neurons(model, layer, neurons)
        kept.append({"heads": heads, "value_dims": [len(d) for d in dims], "neurons": len(neurons)})
    return kept
