"""Width surgery: keep a subset of attention heads or MLP hidden neurons in one block.

Both edits are exact for the kept units: the pruned model equals the original with the removed
heads' outputs (or removed neurons' activations) set to zero. :func:`compensate_mean_shift`
changes that zero into a constant (VBP's mean shift); it only changes weights, so it is not an edit.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.recipe.edits import register_edit
from vitprune.linear import check_indices, slice_linear


@register_edit("prune_heads")
def prune_heads(model: nn.Module, block: int, keep: Sequence[int]) -> None:
    """Keep only attention heads ``keep`` (sorted head indices) in block ``block``."""
    adapter = get_adapter(model)
    attn = adapter.block(block).attn
    if attn is None:
        raise ValueError(f"block {block} has no attention to prune")
    if attn.value_dims is not None:
        raise ValueError(f"block {block}: heads of different value widths; use prune_attention_dims")
    keep = check_indices(keep, attn.num_heads, f"block {block} heads")
    hd = attn.head_dim
    head_rows = [h * hd + d for h in keep for d in range(hd)]
    adapter.set_attention(block, qkv=attn.qkv.select(head_rows, head_rows, head_rows),
                          proj=slice_linear(attn.proj, in_idx=head_rows), num_heads=len(keep), heads=keep)


def _uniform_attention(model: nn.Module, block: int, edit: str):
    """The adapter and block ``block``'s attention view, which ``edit`` needs uniform and ungated."""
    adapter = get_adapter(model)
    attn = adapter.block(block).attn
    if attn is None:
        raise ValueError(f"block {block} has no attention to prune")
    if attn.value_dims is not None or attn.gate is not None:
        raise ValueError(f"block {block}: {edit} needs uniform, ungated attention")
    return adapter, attn


@register_edit("prune_head_dims")
def prune_head_dims(model: nn.Module, block: int, keep: Sequence[int]) -> None:
    """Keep dimensions ``keep`` (sorted offsets within a head) of every head's query, key and value in block ``block``.

    What torch-pruning's head-dimension pruning does: the same offsets in every head, so heads stay
    uniform and timm's fused attention still runs. The softmax scale becomes the new
    ``head_dim**-0.5``, which timm's fused kernel applies anyway. Not function-preserving (the
    query-key products lose terms).
    """
    adapter, attn = _uniform_attention(model, block, "prune_head_dims")
    if attn.qk_norm:
        raise ValueError(f"block {block}: query/key norms over the head dimension cannot lose dimensions")
    hd, heads = attn.head_dim, attn.num_heads
    keep = check_indices(keep, hd, f"block {block} head dimensions")
    cols = [h * hd + j for h in range(heads) for j in keep]
    adapter.set_attention(block, qkv=attn.qkv.select(cols, cols, cols), proj=slice_linear(attn.proj, in_idx=cols),
                          num_heads=heads, head_dim=len(keep))


@register_edit("prune_attention_dims")
def prune_attention_dims(model: nn.Module, block: int, heads: Sequence[int],
                         value_dims: Sequence[Sequence[int]]) -> None:
    """Keep attention heads ``heads`` of block ``block``, each with its own value dimensions ``value_dims[i]``.

    Queries and keys of a kept head stay whole; its value rows and the matching input
    columns of ``proj`` are sliced to the kept dimensions. The result equals the original with the
    removed heads' outputs and the removed value dimensions set to zero. With no head kept the
    branch is ``proj``'s bias alone, as gating every head (HiAP Eq. 1) leaves it.
    """
    adapter, attn = _uniform_attention(model, block, "prune_attention_dims")
    adapter.require("value_width", by="value-width pruning")
    heads = check_indices(heads, attn.num_heads, f"block {block} heads", allow_empty=True)
    if len(value_dims) != len(heads):
        raise ValueError(f"block {block}: {len(value_dims)} value-dimension lists for {len(heads)} kept heads")
    hd = attn.head_dim
    dims = [check_indices(d, hd, f"block {block} head {h} value dimensions") for h, d in zip(heads, value_dims)]
    qk_rows = [h * hd + j for h in heads for j in range(hd)]
    v_cols = [h * hd + j for h, d in zip(heads, dims) for j in d]
    adapter.set_value_dims(block, attn.qkv.select(qk_rows, qk_rows, v_cols), slice_linear(attn.proj, in_idx=v_cols),
                           [len(d) for d in dims])


@register_edit("prune_mlp_neurons")
def prune_mlp_neurons(model: nn.Module, block: int, keep: Sequence[int]) -> None:
    """Keep only MLP hidden neurons ``keep`` (sorted indices, possibly none) in block ``block``.

    With none kept the MLP outputs ``fc2``'s bias alone, for every token.
    """
    adapter = get_adapter(model, needs=("ffn_width",), by="neuron pruning")
    mlp = adapter.block(block).mlp
    if mlp.merged:
        raise ValueError(f"block {block} has no MLP hidden neurons to prune")
    keep = check_indices(keep, mlp.hidden_features, f"block {block} MLP neurons", allow_empty=True)
    adapter.set_mlp(block, fc1=slice_linear(mlp.fc1, out_idx=keep), fc2=slice_linear(mlp.fc2, in_idx=keep))


@register_edit("prune_embed_dims")
def prune_embed_dims(model: nn.Module, keep: Sequence[int]) -> None:
    """Keep only the residual-stream (embedding) channels ``keep`` (sorted indices) in the whole model.

    Every layer that reads or writes the stream loses the other channels (see
    :meth:`~vitprune.adapters.base.ViTAdapter.prune_embed_dims`). Unlike the other width edits this
    changes the function even for zero channels, since each LayerNorm's statistics then run over
    the kept channels only; keeping all channels changes nothing.
    """
    adapter = get_adapter(model, needs=("embed_width",), by="embedding pruning")
    if any(v.attn is not None and v.attn.gate is not None or v.mlp.gate is not None for v in adapter.blocks()):
        raise ValueError("embedding channels cannot be pruned while depth gates are in place")
    adapter.prune_embed_dims(check_indices(keep, adapter.embed_dim, "embedding channels"))


def compensate_mean_shift(model: nn.Module, block: int, removed: Sequence[int], means: torch.Tensor) -> None:
    """Fold the mean activation of hidden neurons ``removed`` into ``fc2``'s bias: ``b2 += W2[:, removed] @ means``.

    ``means`` holds the mean of every hidden neuron of the block (``removed`` picks from it). After
    :func:`prune_mlp_neurons` drops those neurons, the MLP computes exactly what it did with their
    activations replaced by their means (VBP Eq. 5). Computed in float64, then cast.
    """
    mlp = get_adapter(model).block(block).mlp
    if mlp.merged:
        raise ValueError(f"block {block} has no MLP hidden neurons to compensate")
    if means.shape != (mlp.hidden_features,):
        raise ValueError(f"block {block}: {tuple(means.shape)} means for {mlp.hidden_features} hidden neurons")
    idx = torch.as_tensor(list(removed), dtype=torch.long, device=mlp.fc2.weight.device)
    if mlp.fc2.bias is None:
        raise ValueError(f"block {block}: fc2 has no bias to fold the means into")
    shift = mlp.fc2.weight.detach().double()[:, idx] @ means.to(mlp.fc2.weight.device, torch.float64)[idx]
    with torch.no_grad():
        mlp.fc2.bias.add_(shift.to(mlp.fc2.bias.dtype))
