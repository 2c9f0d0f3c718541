"""HiAP: Gumbel-sigmoid gates on heads, value dimensions, FFN blocks and neurons, trained under a MAC penalty.

The gates (:mod:`~vitprune.methods.hiap.gates`), the analytical cost model with the feasibility
penalties (:mod:`~vitprune.methods.hiap.cost`), the gated forward pass (:mod:`~vitprune.methods.hiap.gated`),
single-phase training with the budget controller (:mod:`~vitprune.methods.hiap.search`), the
extraction (:mod:`~vitprune.methods.hiap.extract`) and the pipeline (:mod:`~vitprune.methods.hiap.pipeline`).
"""

from vitprune.lazy import lazy_exports
from vitprune.methods.hiap.config import COST_MODELS, TRAIN_DEFAULTS, HiAPConfig, HiAPRun

__getattr__, __dir__ = lazy_exports(__name__, {
    ".cost": ("cost_penalty", "dense_cost", "feasibility", "gate_cost", "layer_shapes", "unit_costs"),
    ".extract": ("extract",),
    ".gated": ("GatedForward",),
    ".gates": ("FAMILIES", "HiAPGates", "LayerShape", "gumbel_sigmoid", "temperature"),
    ".pipeline": ("HiAPReport", "run_hiap"),
    ".search": ("budget_threshold", "layer_summary", "train_gates"),
})

__all__ = [
    "COST_MODELS", "FAMILIES", "TRAIN_DEFAULTS", "GatedForward", "HiAPConfig", "HiAPGates", "HiAPReport", "HiAPRun",
    "LayerShape",
    "budget_threshold",
    "cost_penalty", "dense_cost", "extract", "feasibility", "gate_cost", "gumbel_sigmoid", "layer_shapes",
    "layer_summary", "run_hiap", "temperature", "train_gates", "unit_costs",
]
