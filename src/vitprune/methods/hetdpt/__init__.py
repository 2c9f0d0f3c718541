"""HetDPT: heterogeneous depth pruning of attention and activation (GELU) layers.

The pipeline: :func:`run_hetdpt` with a :class:`HetDPTRun` (the budget, the split and :func:`configure`'s settings).
The two analyses that motivate the method (paper Figs. 4 and 5): :func:`gradient_disparity`
and :func:`recovery_asymmetry`, with their figures.

Stage 1, Step 1, the Model Accuracy Predictor: :func:`fit_predictor` fits it to measured
``(a, t, accuracy)`` points and :func:`search_split` divides a depth budget between the two types.
:func:`collect_predictor_data` measures those points (Algorithms 1 and 2), removing at each round
the layer of least transfer entropy (:func:`transfer_entropy`; :func:`rank_layers` is "TE-static").
"""

from vitprune.lazy import lazy_exports
from vitprune.methods.hetdpt.config import INTERLEAVED_ORDERS, HetDPTConfig, HetDPTRun

__getattr__, __dir__ = lazy_exports(__name__, {
    ".analysis": ("LAYER_TYPES", "gradient_disparity", "recovery_asymmetry"),
    ".collect": ("POINT_ALGORITHMS", "collect_predictor_data"),
    ".entropy": ("feature_entropy", "rank_layers", "transfer_entropy"),
    ".pipeline": ("HetDPTReport", "configure", "preset", "run_hetdpt"),
    ".plots": ("plot_gradient_disparity", "plot_predictor", "plot_recovery"),
    ".predictor": ("PredictorFit", "Split", "fit_predictor", "load_predictor", "save_predictor", "search_split"),
})

__all__ = [
    "INTERLEAVED_ORDERS", "LAYER_TYPES", "POINT_ALGORITHMS", "HetDPTConfig", "HetDPTReport", "HetDPTRun",
    "PredictorFit", "Split", "collect_predictor_data", "configure", "preset", "run_hetdpt",
    "feature_entropy", "fit_predictor", "gradient_disparity", "load_predictor", "plot_gradient_disparity",
    "plot_predictor", "plot_recovery", "rank_layers", "recovery_asymmetry", "save_predictor", "search_split",
    "transfer_entropy",
]
