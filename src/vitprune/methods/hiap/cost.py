"""HiAP's analytical cost model (paper Eq. 5) and feasibility penalties, in MACs per image.

Per block the prunable cost is linear in the gates:
``Σ_h w_head·g_h + Σ_{h,j} w_dim·g_h·d_hj + Σ_k w_neuron·b·c_k``. Its expectation under independent
gates replaces each gate by its probability. Two sets of weights:

* ``paper`` (Eq. 5, halved to MACs): head overhead ``3·N·D·D_h + N²·D_h`` (Q, K and V of a head and
  ``QKᵀ``), per value dimension ``N·D + N²`` (its ``W_O`` column and ``A·V``), per neuron ``2·N·D``;
* ``exact``: what the extracted model really costs, since a pruned value dimension also loses its V
  row: ``2·N·D·D_h + N²·D_h``, ``2·N·D + N²`` and ``2·N·D``.

Where each query attends to ``M`` tokens rather than all ``N`` (Swin's windows), ``N²`` is ``N·M``. ``N`` and ``D``
are each block's own (Swin's and ConvNeXt's stages differ), as ``count_macs`` sees them; a block without attention
(ConvNeXt) has neurons only. Both give the dense MACs when every gate is 1, and the per-layer kept cost of the
extracted model is exactly the ``exact`` model's hardened cost.
"""

from __future__ import annotations

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.measure import count_macs
from vitprune.methods.hiap.config import COST_MODELS
from vitprune.methods.hiap.gates import LayerShape


def layer_shapes(model: nn.Module) -> list[LayerShape]:
    """The prunable shape of every block of a supported model: tokens as one forward pass sees them, the block's
    width, heads and FFN width. A family with attention needs it in every block (uniform); every block needs its
    unmerged MLP and no token pruning. Value dimensions are gated where the family can give heads their own value
    widths."""
    adapter = get_adapter(model)
    has_attention = "head_width" in adapter.capabilities
    value_gates = "value_width" in adapter.capabilities
    tokens = {b.index: b.tokens for b in count_macs(model).blocks}
    shapes = []
    for view in adapter.blocks():
        attn = view.attn
        if (has_attention and (attn is None or attn.value_dims is not None)) or view.mlp.merged \
                or view.token_op is not None:
            raise UnsupportedArchitectureError(f"HiAP gates {view.name}'s heads and neurons; it needs the block's "
                                               "uniform attention and unmerged MLP, and no token reduction")
        shapes.append(LayerShape(tokens=tokens[view.index], dim=view.mlp.fc1.in_features,
                                 heads=attn.num_heads if attn else 0, head_dim=attn.head_dim if attn else 0,
                                 hidden=view.mlp.hidden_features, context=attn.context if attn else None,
                                 value_gates=value_gates))
    return shapes


def unit_costs(shape: LayerShape, cost_model: str = "paper") -> tuple[int, int, int]:
    """MACs of one head's overhead, one value dimension and one FFN neuron in a block of ``shape``."""
    n, d, dh, m = shape.tokens, shape.dim, shape.head_dim, shape.attended
    if cost_model == "paper":
        return 3 * n * d * dh + n * m * dh, n * d + n * m, 2 * n * d
    if cost_model == "exact":
        return 2 * n * d * dh + n * m * dh, 2 * n * d + n * m, 2 * n * d
    raise VitpruneError(f"unknown cost model {cost_model!r} (choose from: {', '.join(COST_MODELS)})")


def gate_cost(gates: dict[str, list[torch.Tensor]], shapes: list[LayerShape],
              cost_model: str = "paper") -> tuple[torch.Tensor, torch.Tensor]:
    """``(macro, micro)`` MACs for gate values (probabilities for the expectation, 0/1 for a hardened model).

    Macro is the head overheads, micro the value dimensions and neurons (each under its parent gate),
    so they can carry the paper's separate weights ``λ_macro`` and ``λ_micro``.
    """
    macro = micro = 0.0
    for layer, shape in enumerate(shapes):
        w_head, w_dim, w_neuron = unit_costs(shape, cost_model)
        head, dim, block, neuron = (gates[name][layer] for name in ("head", "dim", "block", "neuron"))
        macro = macro + w_head * head.sum()
        micro = micro + w_dim * (head[:, None] * dim).sum() + w_neuron * block * neuron.sum()
    return torch.as_tensor(macro), torch.as_tensor(micro)


def dense_cost(shapes: list[LayerShape]) -> int:
    """MACs of every prunable part with all gates open (the same under both cost models)."""
    total = 0
    for shape in shapes:
        w_head, w_dim, w_neuron = unit_costs(shape, "paper")
        total += shape.heads * (w_head + shape.head_dim * w_dim) + shape.hidden * w_neuron
    return total


def feasibility(probabilities: dict[str, list[torch.Tensor]], *, min_heads: float = 1.0, min_dims: float = 0.25,
                min_neurons: float = 0.1) -> dict[str, torch.Tensor]:
    """The squared-hinge penalties keeping layers from collapsing, on gate probabilities.

    ``head``: ``Σ_l ReLU(min_heads − Σ_h p_h)²`` (paper Eq. 8). ``dim`` and ``neuron``: the share of
    value dimensions kept in each head, and of neurons in each FFN, below ``min_dims`` /
    ``min_neurons``, weighted by the (detached) probability that the head or FFN is open: the
    constraint holds within active structures, and must not reward closing them.
    """
    head = dim = neuron = 0.0
    for p_head, p_dim, p_block, p_neuron in zip(*(probabilities[n] for n in ("head", "dim", "block", "neuron")),
                                                 strict=True):
        if p_head.numel():  # a block without attention (ConvNeXt) has no heads to keep
            head = head + torch.relu(min_heads - p_head.sum()) ** 2
        dim = dim + (p_head.detach() * torch.relu(min_dims - p_dim.mean(dim=1)) ** 2).sum()
        neuron = neuron + p_block.detach() * torch.relu(min_neurons - p_neuron.mean()) ** 2
    return {"head": torch.as_tensor(head), "dim": torch.as_tensor(dim), "neuron": torch.as_tensor(neuron)}


def cost_penalty(probabilities: dict[str, list[torch.Tensor]], shapes: list[LayerShape], *, lambda_macro: float,
                 lambda_micro: float, cost_model: str = "paper") -> dict[str, torch.Tensor]:
    """Paper Eq. 7's cost terms: ``λ_macro·L_macro + λ_micro·L_micro``, each an expected cost over the dense one.

    The paper's λ are O(1) while costs are ~1e9 MACs, so it must normalise and does not say how;
    dividing by the dense prunable cost (the note's reading) makes ``L_macro + L_micro`` the expected
    kept share of the prunable compute. Returns the terms and their weighted sum (``"loss"``).
    """
    macro, micro = gate_cost(probabilities, shapes, cost_model)
    dense = dense_cost(shapes)
    terms = {"macro": macro / dense, "micro": micro / dense}
    return {**terms, "loss": lambda_macro * terms["macro"] + lambda_micro * terms["micro"]}
