"""HiAP: Gumbel-sigmoid gates on heads, value dimensions, FFN blocks and neurons, trained under a MAC penalty.

So far (issue 8, in progress): the gates (:mod:`~vitprune.methods.hiap.gates`), the analytical
cost model with the feasibility penalties (:mod:`~vitprune.methods.hiap.cost`) and the gated
forward pass (:mod:`~vitprune.methods.hiap.gated`). Training and extraction are still to come.
"""

from vitprune.methods.hiap.cost import COST_MODELS, dense_cost, feasibility, gate_cost, layer_shapes, unit_costs
from vitprune.methods.hiap.gated import GatedForward
from vitprune.methods.hiap.gates import FAMILIES, HiAPGates, LayerShape, gumbel_sigmoid, temperature

__all__ = [
    "COST_MODELS", "FAMILIES", "GatedForward", "HiAPGates", "LayerShape", "dense_cost", "feasibility", "gate_cost",
    "gumbel_sigmoid", "layer_shapes", "temperature", "unit_costs",
]
