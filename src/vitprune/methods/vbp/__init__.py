"""VBP: variance-based one-shot pruning of MLP neurons with mean-shift compensation.

So far: :func:`mlp_statistics` (Step 1), :func:`select_neurons` and :func:`prune_by_selection`
(Steps 2 and 3). The CLI, baselines and benchmark are still to come (issue 6).
"""

from vitprune.methods.vbp.selection import ROUNDINGS, prune_by_selection, select_neurons
from vitprune.methods.vbp.statistics import PLACES, NeuronStats, mlp_statistics

__all__ = ["PLACES", "ROUNDINGS", "NeuronStats", "mlp_statistics", "prune_by_selection", "select_neurons"]
