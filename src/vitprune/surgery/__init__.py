"""Exact structural edits, shared by every method. Importing this package registers the edits."""

from vitprune.surgery.linear import check_indices, slice_linear
from vitprune.surgery.width import prune_heads, prune_mlp_neurons

__all__ = ["check_indices", "prune_heads", "prune_mlp_neurons", "slice_linear"]
