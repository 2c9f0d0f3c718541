"""Exact structural edits, shared by every method. Importing this package registers the edits."""

from vitprune.surgery.depth import (
    ATTENTION_IDENTITIES, IDENTITY_HELP, OUTPUT_GELU_HELP, add_output_activation, check_depth_layers,
    depth_requirements, merge_linear_mlps, merge_mlp, prune_depth,
    remaining_layers, remove_activation, remove_attention,
)
from vitprune.surgery.depth_gates import DepthGates, add_depth_gates, prune_gated, remove_depth_gates
from vitprune.linear import check_indices, merge_linears, slice_linear
from vitprune.surgery.tokens import prune_tokens, set_token_prior, token_pruning_blocks
from vitprune.surgery.width import (
    compensate_mean_shift, prune_attention_dims, prune_embed_dims, prune_head_dims, prune_heads, prune_mlp_neurons,
)

__all__ = [
    "ATTENTION_IDENTITIES", "IDENTITY_HELP", "OUTPUT_GELU_HELP", "DepthGates", "add_depth_gates",
    "add_output_activation", "check_depth_layers", "depth_requirements",
    "check_indices", "compensate_mean_shift", "merge_linear_mlps", "merge_linears", "merge_mlp",
    "prune_attention_dims", "prune_depth", "prune_embed_dims", "prune_gated", "prune_head_dims", "prune_heads",
    "prune_mlp_neurons", "prune_tokens",
    "remaining_layers", "remove_activation", "remove_attention", "remove_depth_gates", "set_token_prior",
    "slice_linear", "token_pruning_blocks",
]
