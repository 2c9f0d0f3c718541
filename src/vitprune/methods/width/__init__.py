"""Width pruning (heads, head dimensions, FFN neurons, embedding channels) chosen by torch-pruning."""

from vitprune.methods.width.isomorphic import (IMPORTANCES, NoHeadLeftError, WidthPlan, apply_width, plan_width,
                                              prune_width, prune_width_to_macs, taylor_gradients, taylor_scores)
from vitprune.methods.width.pipeline import WidthConfig, WidthReport, run_width

__all__ = ["IMPORTANCES", "NoHeadLeftError", "WidthConfig", "WidthPlan", "WidthReport", "apply_width", "plan_width",
           "prune_width", "prune_width_to_macs", "run_width", "taylor_gradients", "taylor_scores"]
