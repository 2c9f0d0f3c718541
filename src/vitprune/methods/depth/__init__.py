"""Depth pruning by hand: remove the attention sublayers and MLP activations named (HetDPT's surgery, without its
search), save the result and time it (:func:`run_depth`)."""

from vitprune.methods.depth.pipeline import DepthConfig, DepthReport, run_depth

__all__ = ["DepthConfig", "DepthReport", "run_depth"]
