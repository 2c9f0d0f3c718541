"""HiAP: Gumbel-sigmoid gates on heads, value dimensions, FFN blocks and neurons, trained under a MAC penalty.

So far (issue 8, in progress): the gates (:mod:`~vitprune.methods.hiap.gates`), the analytical
cost model with the feasibility penalties (:mod:`~vitprune.methods.hiap.cost`), the gated forward
pass (:mod:`~vitprune.methods.hiap.gated`) and the extraction (:mod:`~vitprune.methods.hiap.extract`).
The training loop, budget targeting and CLI are still to come.
"""

from vitprune.methods.hiap.cost import (
    COST_MODELS, cost_penalty, dense_cost, feasibility, gate_cost, layer_shapes, unit_costs,
)
from vitprune.methods.hiap.extract import extract
from vitprune.methods.hiap.gated import GatedForward
from vitprune.methods.hiap.gates import FAMILIES, HiAPGates, LayerShape, gumbel_sigmoid, temperature

__all__ = [
    "COST_MODELS", "FAMILIES", "GatedForward", "HiAPGates", "LayerShape", "cost_penalty", "dense_cost", "extract",
    "feasibility", "gate_cost", "gumbel_sigmoid", "layer_shapes", "temperature", "unit_costs",
]
