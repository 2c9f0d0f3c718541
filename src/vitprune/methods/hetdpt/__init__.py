"""HetDPT: heterogeneous depth pruning of attention and activation (GELU) layers.

So far the two analyses that motivate the method (paper Figs. 4 and 5): :func:`gradient_disparity`
and :func:`recovery_asymmetry`, with their figures.
"""

from vitprune.methods.hetdpt.analysis import LAYER_TYPES, gradient_disparity, recovery_asymmetry
from vitprune.methods.hetdpt.plots import plot_gradient_disparity, plot_recovery

__all__ = ["LAYER_TYPES", "gradient_disparity", "plot_gradient_disparity", "plot_recovery", "recovery_asymmetry"]
