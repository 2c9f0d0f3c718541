"""VBP: variance-based one-shot pruning of MLP neurons with mean-shift compensation.

:func:`mlp_statistics` (Step 1), :func:`neuron_scores` (VBP's variance and the paper's baselines),
:func:`select_neurons` (by ratio), :func:`select_for_macs` (to a MAC target) and :func:`prune_by_selection`
(Steps 2 and 3).
"""

from vitprune.lazy import lazy_exports
from vitprune.methods.vbp.config import CRITERIA, ROUNDINGS

__getattr__, __dir__ = lazy_exports(__name__, {
    ".criteria": ("magnitude_scores", "neuron_scores", "random_scores", "snip_scores"),
    ".selection": ("prune_by_selection", "removal_count", "select_count", "select_for_macs", "select_neurons"),
    ".statistics": ("PLACES", "NeuronStats", "hidden_mlps", "mlp_statistics"),
})

__all__ = [
    "CRITERIA", "PLACES", "ROUNDINGS", "NeuronStats", "hidden_mlps", "magnitude_scores", "mlp_statistics",
    "neuron_scores", "prune_by_selection", "random_scores", "removal_count", "select_count", "select_for_macs",
    "select_neurons", "snip_scores",
]
