"""Width pruning (heads, head dimensions, FFN neurons, embedding channels) chosen by torch-pruning."""

from vitprune.methods.width.isomorphic import (IMPORTANCES, WidthPlan, apply_width, plan_width, prune_width,
                                              prune_width_to_macs)

__all__ = ["IMPORTANCES", "WidthPlan", "apply_width", "plan_width", "prune_width", "prune_width_to_macs"]
