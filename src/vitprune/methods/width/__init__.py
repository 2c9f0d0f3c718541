"""Width pruning (heads, head dimensions, FFN neurons, embedding channels) chosen by torch-pruning."""

from vitprune.lazy import lazy_exports
from vitprune.methods.width.config import IMPORTANCES, WidthConfig

__getattr__, __dir__ = lazy_exports(__name__, {
    ".isomorphic": ("NoHeadLeftError", "WidthPlan", "apply_width", "plan_width", "prune_width", "prune_width_to_macs",
                    "taylor_gradients", "taylor_scores"),
    ".pipeline": ("WidthReport", "run_width"),
})

__all__ = ["IMPORTANCES", "NoHeadLeftError", "WidthConfig", "WidthPlan", "WidthReport", "apply_width", "plan_width",
           "prune_width", "prune_width_to_macs", "run_width", "taylor_gradients", "taylor_scores"]
