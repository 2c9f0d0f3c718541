"""Depth surgery: remove whole attention sublayers, and remove MLP activations so fc1 and fc2 merge.

Removing a block's activation leaves ``fc2(fc1(x))``, which is one Linear (``W2 W1``, ``W2 b1 +
b2``): the block keeps its width and loses depth (HetDPT Eq. 7). Removing an attention sublayer
turns its branch into an identity, in one of two readings (see :data:`ATTENTION_IDENTITIES`).
Both edits are exact for what they claim: the pruned model equals the gated model with the same
masks (:mod:`vitprune.surgery.depth_gates`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.recipe.edits import register_edit
from vitprune.linear import fold_input_affine, merge_linears
from vitprune.surgery.config import ATTENTION_IDENTITIES, depth_requirements

#: Activations the compatibility option may put on a block's output.
_OUTPUT_ACTIVATIONS = {"gelu": nn.GELU}


def _layer_scale(module: nn.Module | None, where: str) -> torch.Tensor | None:
    """The per-channel scale of a LayerScale module; ``None`` for the identity."""
    if module is None or isinstance(module, nn.Identity):
        return None
    gamma = getattr(module, "gamma", None)
    if not isinstance(gamma, torch.Tensor):
        raise UnsupportedArchitectureError(f"unsupported architecture: {where} is {type(module).__name__}, "
                                           "not a LayerScale with a per-channel gamma")
    return gamma.detach()


def _affine_layer_norm(norm: nn.Module, where: str) -> nn.LayerNorm:
    if not isinstance(norm, nn.LayerNorm):
        raise UnsupportedArchitectureError(f"unsupported architecture: {where} is {type(norm).__name__}; "
                                           "only LayerNorm can be folded")
    return norm


def _scaled_norm(norm: nn.Module, scale: torch.Tensor | None, where: str) -> nn.Module:
    """``norm`` followed by a per-channel ``scale``, as one norm (``norm`` itself when there is no scale)."""
    if scale is None:
        return norm
    norm = _affine_layer_norm(norm, where)
    width = norm.normalized_shape[0]
    one = torch.ones(width, dtype=scale.dtype, device=scale.device)
    weight = norm.weight.detach() if norm.weight is not None else one
    bias = norm.bias.detach() if norm.bias is not None else torch.zeros_like(one)
    new = nn.LayerNorm(width, eps=norm.eps, device=scale.device, dtype=scale.dtype)
    with torch.no_grad():
        new.weight.copy_(weight * scale)
        new.bias.copy_(bias * scale)
    return new.train(norm.training)


@register_edit("remove_attention")
def remove_attention(model: nn.Module, block: int, identity: str = "norm") -> None:
    """Remove the attention sublayer of block ``block``; ``identity`` is a key of :data:`ATTENTION_IDENTITIES`."""
    if identity not in ATTENTION_IDENTITIES:
        raise ValueError(f"unknown attention identity {identity!r} (choose from: {', '.join(ATTENTION_IDENTITIES)})")
    adapter = get_adapter(model, needs=("attention_removal",), by="attention removal")
    view = adapter.block(block)
    if view.attn is None:
        raise ValueError(f"block {block} has no attention to remove")
    norm = None
    if identity == "norm":
        norm = _scaled_norm(view.norm1, _layer_scale(view.ls1, f"{view.name}.ls1"), f"{view.name}.norm1")
    adapter.remove_attention(block, norm)


@register_edit("remove_activation")
def remove_activation(model: nn.Module, block: int, fold_norm: bool = False, merge: bool = True) -> None:
    """Remove the MLP activation of block ``block``, leaving ``fc2(fc1(x))``; with ``merge``, as one Linear.

    ``merge=False`` keeps fc1 and fc2 apart (HetDPT fine-tunes them so and merges afterwards, with
    :func:`merge_mlp`). ``fold_norm`` is :func:`merge_mlp`'s.
    """
    adapter = get_adapter(model, needs=("activation_removal",), by="activation removal")
    if not adapter.block(block).mlp.has_activation:
        raise ValueError(f"block {block} has no activation left to remove")
    if fold_norm and not merge:
        raise ValueError("fold_norm folds into the merged Linear, so it needs merge=True")
    adapter.set_activation(block, nn.Identity())
    if merge:
        _merge(adapter, block, fold_norm)


@register_edit("merge_mlp")
def merge_mlp(model: nn.Module, block: int, fold_norm: bool = False) -> None:
    """Merge fc2·fc1 (and LayerScale) of block ``block``, whose activation is gone, into one Linear.

    ``fold_norm`` also folds the affine part of ``norm2`` into the merged Linear, leaving a
    parameter-free LayerNorm before it.
    """
    adapter = get_adapter(model, needs=("activation_removal",), by="merging fc1·fc2")
    mlp = adapter.block(block).mlp
    if mlp.merged or mlp.has_activation:
        raise ValueError(f"block {block} has no activation-free MLP left to merge")
    _merge(adapter, block, fold_norm)


def _merge(adapter, block: int, fold_norm: bool) -> None:
    view = adapter.block(block)
    mlp = view.mlp
    linear = merge_linears(mlp.fc1, mlp.fc2, _layer_scale(view.ls2, f"{view.name}.ls2"))
    if fold_norm:
        norm = _affine_layer_norm(view.norm2, f"{view.name}.norm2")
        if norm.weight is not None:
            linear = fold_input_affine(linear, norm.weight.detach(), norm.bias.detach() if norm.bias is not None
                                       else None)
            bare = nn.LayerNorm(norm.normalized_shape, eps=norm.eps, elementwise_affine=False)
            adapter.set_norm(block, 2, bare.train(norm.training))
    adapter.merge_mlp(block, linear)


def merge_linear_mlps(model: nn.Module, fold_norm: bool = False) -> list[int]:
    """Merge every MLP whose activation was removed but whose linears are still apart; returns their blocks."""
    blocks = [v.index for v in get_adapter(model).blocks() if not v.mlp.merged and not v.mlp.has_activation]
    for block in blocks:
        merge_mlp(model, block, fold_norm=fold_norm)
    return blocks


@register_edit("add_output_activation")
def add_output_activation(model: nn.Module, block: int, act: str = "gelu") -> None:
    """Apply ``act`` to the output of block ``block``: the reference HetDPT code's extra GELU (compatibility only)."""
    if act not in _OUTPUT_ACTIVATIONS:
        raise ValueError(f"unknown output activation {act!r} (choose from: {', '.join(_OUTPUT_ACTIVATIONS)})")
    adapter = get_adapter(model, needs=("output_activation",), by="an output activation")
    if not isinstance(adapter.block(block).act, nn.Identity):
        raise ValueError(f"block {block} already has an output activation")
    adapter.set_output_activation(block, _OUTPUT_ACTIVATIONS[act]())


def remaining_layers(model: nn.Module) -> dict[str, list[int]]:
    """The blocks that still have their attention, and their activation, keyed by layer type."""
    views = get_adapter(model).blocks()
    return {"attention": [v.index for v in views if v.attn is not None],
            "activation": [v.index for v in views if v.mlp.has_activation]}


def check_layer_indices(indices: Sequence[int], num_blocks: int, what: str) -> list[int]:
    """Sorted block indices for removal: each in range and named once, else a :class:`VitpruneError`."""
    idx = [int(i) for i in indices]
    bad = [i for i in idx if not 0 <= i < num_blocks]
    if bad:
        raise VitpruneError(f"{what} index {bad[0]} is out of range: the model has {num_blocks} blocks "
                            f"(0-{num_blocks - 1})")
    repeated = sorted({i for i in idx if idx.count(i) > 1})
    if repeated:
        raise VitpruneError(f"{what} index {repeated[0]} is given more than once")
    return sorted(idx)


def check_depth_layers(model: nn.Module, attention: Sequence[int] = (),
                       activation: Sequence[int] = ()) -> tuple[list[int], list[int]]:
    """Sorted block indices whose attention / activation can be removed, else a one-line :class:`VitpruneError`.

    Each index must be in range, named once, and name a layer the model still has.
    """
    views = get_adapter(model).blocks()
    attention = check_layer_indices(attention, len(views), "attention")
    activation = check_layer_indices(activation, len(views), "activation")
    gone = [i for i in attention if views[i].attn is None]
    if gone:
        raise VitpruneError(f"block {gone[0]} has no attention left to remove")
    gone = [i for i in activation if not views[i].mlp.has_activation]
    if gone:
        raise VitpruneError(f"block {gone[0]} has no activation left to remove")
    return attention, activation


def prune_depth(model: nn.Module, attention: Sequence[int] = (), activation: Sequence[int] = (), *,
                identity: str = "norm", fold_norm: bool = False, output_gelu: bool = False,
                merge: bool = True) -> None:
    """Remove the attention of blocks ``attention`` and the activation of blocks ``activation``, in place.

    ``identity`` chooses what a removed attention leaves (:data:`ATTENTION_IDENTITIES`);
    ``merge=False`` leaves each activation-free MLP as fc1 and fc2, to be fine-tuned so and merged
    later (:func:`merge_linear_mlps`); ``fold_norm`` folds each merged block's norm2 affine into its
    merged Linear; ``output_gelu`` reproduces the reference code's GELU on the output of every block
    that has lost both.
    Indices out of range, repeated or naming a layer already removed raise :class:`VitpruneError`.
    """
    if identity not in ATTENTION_IDENTITIES:
        raise VitpruneError(f"unknown attention identity {identity!r} "
                            f"(choose from: {', '.join(ATTENTION_IDENTITIES)})")
    get_adapter(model).require(*depth_requirements(attention, activation, output_gelu), by="depth pruning")
    attention, activation = check_depth_layers(model, attention, activation)
    for i in attention:
        remove_attention(model, i, identity=identity)
    for i in activation:
        remove_activation(model, i, fold_norm=fold_norm, merge=merge)
    if output_gelu:
        for view in get_adapter(model).blocks():
            if view.attn is None and not view.mlp.has_activation and isinstance(view.act, nn.Identity):
                add_output_activation(model, view.index)
