"""Depth pruning by hand: remove the attention sublayers and MLP activations named (HetDPT's surgery, without its
search), save the result and time it (:func:`run_depth`)."""

from vitprune.lazy import lazy_exports
from vitprune.methods.depth.config import DepthConfig

__getattr__, __dir__ = lazy_exports(__name__, {".pipeline": ("DepthReport", "run_depth")})

__all__ = ["DepthConfig", "DepthReport", "run_depth"]
