"""Exact structural edits, shared by every method. Using any of them registers them all (:mod:`vitprune.lazy`)."""

from vitprune.lazy import lazy_exports
from vitprune.surgery.config import ATTENTION_IDENTITIES, IDENTITY_HELP, OUTPUT_GELU_HELP, depth_requirements

__getattr__, __dir__ = lazy_exports(__name__, {
    ".depth": ("add_output_activation", "check_depth_layers", "merge_linear_mlps", "merge_mlp", "prune_depth",
               "remaining_layers", "remove_activation", "remove_attention"),
    ".depth_gates": ("DepthGates", "add_depth_gates", "prune_gated", "remove_depth_gates"),
    ".head": ("recorded_classes", "replace_head"),
    ".resolution": ("set_input_size",),
    "vitprune.linear": ("check_indices", "merge_linears", "slice_linear"),
    ".tokens": ("prune_tokens", "set_token_prior", "token_operation", "token_ops", "token_pruning_blocks"),
    ".width": ("compensate_mean_shift", "prune_attention_dims", "prune_embed_dims", "prune_head_dims", "prune_heads",
               "prune_mlp_neurons"),
})

__all__ = [
    "ATTENTION_IDENTITIES", "IDENTITY_HELP", "OUTPUT_GELU_HELP", "DepthGates", "add_depth_gates",
    "add_output_activation", "check_depth_layers", "depth_requirements",
    "check_indices", "compensate_mean_shift", "merge_linear_mlps", "merge_linears", "merge_mlp",
    "prune_attention_dims", "prune_depth", "prune_embed_dims", "prune_gated", "prune_head_dims", "prune_heads",
    "prune_mlp_neurons", "prune_tokens", "recorded_classes", "remaining_layers", "replace_head", "remove_activation",
    "remove_attention", "remove_depth_gates", "set_input_size", "set_token_prior", "slice_linear", "token_operation",
    "token_ops", "token_pruning_blocks",
]
