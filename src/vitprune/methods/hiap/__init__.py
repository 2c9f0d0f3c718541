"""HiAP: Gumbel-sigmoid gates on heads, value dimensions, FFN blocks and neurons, trained under a MAC penalty.

The gates (:mod:`~vitprune.methods.hiap.gates`), the analytical cost model with the feasibility
penalties (:mod:`~vitprune.methods.hiap.cost`), the gated forward pass (:mod:`~vitprune.methods.hiap.gated`),
single-phase training with the budget controller (:mod:`~vitprune.methods.hiap.search`), the
extraction (:mod:`~vitprune.methods.hiap.extract`) and the pipeline (:mod:`~vitprune.methods.hiap.pipeline`).
"""

from vitprune.methods.hiap.cost import (
    COST_MODELS, cost_penalty, dense_cost, feasibility, gate_cost, layer_shapes, unit_costs,
)
from vitprune.methods.hiap.extract import extract
from vitprune.methods.hiap.gated import GatedForward
from vitprune.methods.hiap.gates import FAMILIES, HiAPGates, LayerShape, gumbel_sigmoid, temperature
from vitprune.methods.hiap.pipeline import TRAIN_DEFAULTS, HiAPReport, run_hiap
from vitprune.methods.hiap.search import HiAPConfig, budget_threshold, layer_summary, train_gates

__all__ = [
    "COST_MODELS", "FAMILIES", "TRAIN_DEFAULTS", "GatedForward", "HiAPConfig", "HiAPGates", "HiAPReport", "LayerShape",
    "budget_threshold",
    "cost_penalty", "dense_cost", "extract", "feasibility", "gate_cost", "gumbel_sigmoid", "layer_shapes",
    "layer_summary", "run_hiap", "temperature", "train_gates", "unit_costs",
]
