"""Width surgery: keep a subset of attention heads or MLP hidden neurons in one block.

Both edits are exact for the kept units: the pruned model equals the original with the removed
heads' outputs (or removed neurons' activations) set to zero. Compensating for what was removed
(e.g. VBP's mean shift into ``fc2.bias``) is the calling method's job and lives in the weights.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from vitprune.adapters import get_adapter
from vitprune.recipe.edits import register_edit
from vitprune.surgery.linear import check_indices, slice_linear


@register_edit("prune_heads")
def prune_heads(model: nn.Module, block: int, keep: Sequence[int]) -> None:
    """Keep only attention heads ``keep`` (sorted head indices) in block ``block``."""
    adapter = get_adapter(model)
    attn = adapter.block(block).attn
    if attn is None:
        raise ValueError(f"block {block} has no attention to prune")
    keep = check_indices(keep, attn.num_heads, f"block {block} heads")
    hd, width = attn.head_dim, attn.attn_dim
    head_rows = [h * hd + d for h in keep for d in range(hd)]
    qkv_rows = [part * width + r for part in range(3) for r in head_rows]
    adapter.set_attention(
        block,
        qkv=slice_linear(attn.qkv, out_idx=qkv_rows),
        proj=slice_linear(attn.proj, in_idx=head_rows),
        num_heads=len(keep),
    )


@register_edit("prune_mlp_neurons")
def prune_mlp_neurons(model: nn.Module, block: int, keep: Sequence[int]) -> None:
    """Keep only MLP hidden neurons ``keep`` (sorted indices) in block ``block``."""
    adapter = get_adapter(model)
    mlp = adapter.block(block).mlp
    if mlp is None or mlp.merged:
        raise ValueError(f"block {block} has no MLP hidden neurons to prune")
    keep = check_indices(keep, mlp.hidden_features, f"block {block} MLP neurons")
    adapter.set_mlp(block, fc1=slice_linear(mlp.fc1, out_idx=keep), fc2=slice_linear(mlp.fc2, in_idx=keep))
