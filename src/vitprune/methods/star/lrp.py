"""STAR's inter-layer patch importance: Chefer et al.'s LRP "transformer attribution" rolled out from every layer.

For image ``x`` and class ``c``, block ``l`` contributes ``Ā_l = I + mean_h((∇A_l ⊙ R_l)^+)``, with
``∇A_l`` the gradient of logit ``c`` with respect to the block's attention map and ``R_l`` the LRP
relevance of that map. The importance of patch ``j`` to go from block ``l`` is row [CLS], column
``j`` of ``Ā_L ··· Ā_l``. One forward, one backward and one relevance pass per (batch, class rank)
give every ``Ā_l``; all ``L`` suffix products then come from them (the reference code reruns
everything once per start layer). Each map is min-max normalised and smoothed on the patch grid
(what the reference code's bilinear up- and down-sampling amounts to), then averaged over
images and each image's top-γ predicted classes.

Relevance rules (Chefer's, with LRP-αβ at α=1, β=0 for every Linear): LayerNorm, GELU, softmax,
dropout and LayerScale pass relevance through; a product of two tensors (``q·kᵀ``, ``A·v``)
splits it by the z-rule and halves each share; a residual sum splits it by the z-rule, rescaled
so that it is conserved; a fork sums its branches; [CLS] pooling sends it to the [CLS] token.
Where a token head adds its weighted per-class maximum over the patches to the class logits
(LV-ViT's token labelling), the z-rule splits each logit's relevance between the two, and the
maximum sends the token head's share to the patch that attains it (winner takes all, as LRP treats
max pooling); the weight, a constant factor, passes it through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vitprune.adapters import AttentionView, BlockView, ViTAdapter, get_adapter
from vitprune.adapters.heads import merge_heads, split_heads
from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.training.distributed import DistContext, all_reduce_sum
from vitprune.training.progress import track_batches

_EPS = 1e-9


def _safe_divide(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # Chefer's safe divide: zero where the denominator vanishes, and the denominator nudged away from 0.
    return a / (b + _EPS * torch.where(b >= 0, 1.0, -1.0)) * (b != 0)


def _z_rule(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor], relevance: torch.Tensor) -> list[torch.Tensor]:
    """``x ⊙ ∂Z/∂x · R/Z`` for every input ``x`` of ``Z = fn(*inputs)``."""
    inputs = [x.detach().requires_grad_(True) for x in inputs]
    with torch.enable_grad():
        z = fn(*inputs)
        grads = torch.autograd.grad(z, inputs, _safe_divide(relevance.detach(), z.detach()))
    return [x.detach() * g for x, g in zip(inputs, grads, strict=True)]


def linear_relevance(linear: nn.Linear, x: torch.Tensor, relevance: torch.Tensor) -> torch.Tensor:
    """LRP-αβ (α=1, β=0) through ``linear``: relevance goes to positive contributions only, conserved in total."""
    w = linear.weight.detach()
    pw, nw, px, nx = w.clamp(min=0), w.clamp(max=0), x.clamp(min=0), x.clamp(max=0)

    def share(w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        total = F.linear(px, w1) + F.linear(nx, w2)
        s = _safe_divide(relevance, total)
        return px * (s @ w1) + nx * (s @ w2)

    return share(pw, nw)


def _add_relevance(a: torch.Tensor, b: torch.Tensor, relevance: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """z-rule over ``a + b``, each share rescaled so that |shares| split ``relevance``'s total (Chefer's Add)."""
    ra, rb = _z_rule(torch.add, [a, b], relevance)
    dims = tuple(range(1, relevance.ndim))
    sa, sb, total = (t.sum(dim=dims, keepdim=True) for t in (ra, rb, relevance))
    fa = _safe_divide(sa.abs(), sa.abs() + sb.abs()) * total
    fb = _safe_divide(sb.abs(), sa.abs() + sb.abs()) * total
    return ra * _safe_divide(fa, sa), rb * _safe_divide(fb, sb)


@dataclass
class Readout:
    """What the classifier read: the pooled features and the class head's logits, and where a token head adds to
    them (LV-ViT), the patch features it read and its per-patch logits (before its weight)."""

    pooled: torch.Tensor
    class_logits: torch.Tensor
    patches: torch.Tensor | None = None
    token_logits: torch.Tensor | None = None


@dataclass
class _BlockTrace:
    """One block's intermediate tensors; the attention ones are ``None`` where the block has no head left."""

    x: torch.Tensor
    h1: torch.Tensor
    q: torch.Tensor | None
    k: torch.Tensor | None
    v: torch.Tensor | None
    attn: torch.Tensor | None
    heads: torch.Tensor | None
    x_mid: torch.Tensor
    branch1: torch.Tensor
    h2: torch.Tensor
    hidden: torch.Tensor
    branch2: torch.Tensor


def check_lrp(model: nn.Module) -> None:
    """Raise a one-line :class:`UnsupportedArchitectureError` if relevance cannot be propagated through ``model``."""
    adapter = get_adapter(model)
    views = adapter.blocks()
    for view in views:
        # The relevance rules follow the pre-norm block the views describe, with nothing wrapped around it.
        if view.token_op is not None or not isinstance(view.act, nn.Identity) \
                or (view.attn is not None and view.attn.gate is not None):
            raise UnsupportedArchitectureError(f"LRP importance needs pre-norm blocks without gates, token reduction "
                                               f"or an output activation; {view.name} is "
                                               f"{type(view.module).__name__}")
        if view.mlp.gate is not None:
            raise UnsupportedArchitectureError(f"LRP importance needs {view.name}.mlp without a gate")
    if all(view.attn is None or view.attn.num_heads == 0 for view in views):
        raise UnsupportedArchitectureError("LRP importance follows attention maps; no block has an attention head")
    if not adapter.pools_class_token:
        raise UnsupportedArchitectureError("LRP importance follows a single [CLS] token to the class head")


def _widths(attn: AttentionView) -> tuple[list[int], list[int]]:
    """Per head, the query/key width and the value width (HiAP's heads keep their own value widths)."""
    values = list(attn.value_dims) if attn.value_dims is not None else [attn.head_dim] * attn.num_heads
    return [attn.head_dim] * attn.num_heads, values


def _head(adapter: ViTAdapter) -> nn.Linear | None:
    """The one classifier head; ``None`` for a feature extractor, whose pooled features are its outputs."""
    heads = adapter.classifier_heads()
    return heads[0] if heads else None


def _fc2(view: BlockView) -> nn.Module:
    """The MLP's second linear; a merged MLP has none, so the identity."""
    return nn.Identity() if view.mlp.fc2 is None else view.mlp.fc2


def traced_forward(model: nn.Module, images: torch.Tensor) -> tuple[torch.Tensor, list[_BlockTrace], Readout]:
    """The model's forward through its adapter's views, unfused, keeping what relevance propagation needs:
    ``(logits, traces, readout)``.

    The attention maps ``traces[l].attn`` are part of the autograd graph, so the gradient of any
    logit with respect to them can be taken. Narrower value heads are zero-padded to the query
    width, which changes no product (:func:`~vitprune.adapters.heads.split_heads`).
    """
    adapter = get_adapter(model)
    x = adapter.embed(images)
    traces = []
    for view in adapter.blocks():
        attn = view.attn
        h1 = x if view.norm1 is None else view.norm1(x)
        if attn is None:
            # Attention removed by depth pruning: the branch is LN1(x) (HetDPT's identity) or nothing (skip).
            q = k = v = a = heads = None
            branch1 = torch.zeros_like(x) if view.norm1 is None else view.ls1(h1)
        elif attn.num_heads == 0:
            # No head left: the branch adds proj's bias to every token, and there is no attention map.
            q = k = v = a = heads = None
            branch1 = view.ls1(attn.module(h1))
        else:
            qk, values = _widths(attn)
            q, k, v = (split_heads(part, w, attn.head_dim)
                       for part, w in zip(attn.qkv(h1), (qk, qk, values), strict=True))
            q, k = attn.q_norm(q), attn.k_norm(k)
            a = ((q * attn.softmax_scale) @ k.transpose(-2, -1)).softmax(dim=-1)
            heads = merge_heads(a @ v, values)
            branch1 = view.ls1(attn.proj(heads))
        x_mid = x + branch1
        h2 = view.norm2(x_mid)
        hidden = view.mlp.act(view.mlp.fc1(h2))
        branch2 = view.ls2(_fc2(view)(hidden))
        traces.append(_BlockTrace(x, h1, q, k, v, a, heads, x_mid, branch1, h2, hidden, branch2))
        x = x_mid + branch2
    pooled = adapter.pool(x)
    head = _head(adapter)
    readout = Readout(pooled, pooled if head is None else head(pooled))
    token_head = adapter.token_head
    if token_head is None:
        return readout.class_logits, traces, readout
    readout.patches = adapter.patch_features(x)
    readout.token_logits = token_head.linear(readout.patches)
    return readout.class_logits + token_head.weight * readout.token_logits.max(dim=1).values, traces, readout


def attention_relevance(model: nn.Module, traces: list[_BlockTrace], readout: Readout,
                        relevance: torch.Tensor) -> tuple[list[torch.Tensor | None], torch.Tensor]:
    """Propagate ``relevance`` ``(B, classes)`` from the logits down; the relevance of every attention map
    ``(B, H, N, N)`` (``None`` for a block with no head) and of the tokens entering the first block ``(B, N, D)``."""
    adapter = get_adapter(model)
    head = _head(adapter)
    r = torch.zeros_like(traces[-1].x)
    if readout.token_logits is not None:
        token_head = adapter.token_head
        best = readout.token_logits.detach().max(dim=1)
        relevance, r_token = _z_rule(torch.add, [readout.class_logits.detach(), token_head.weight * best.values],
                                     relevance)
        r_patch_logits = torch.zeros_like(readout.token_logits).scatter_(1, best.indices[:, None], r_token[:, None])
        r[:, adapter.num_prefix_tokens:] = linear_relevance(token_head.linear, readout.patches.detach(),
                                                            r_patch_logits)
    r[:, 0] = relevance if head is None else linear_relevance(head, readout.pooled.detach(), relevance)
    maps = []
    for view, t in zip(reversed(adapter.blocks()), reversed(traces), strict=True):
        attn = view.attn
        r_mid, r_branch2 = _add_relevance(t.x_mid.detach(), t.branch2.detach(), r)
        # A merged MLP is fc1 alone.
        r_hidden = r_branch2 if view.mlp.fc2 is None else linear_relevance(view.mlp.fc2, t.hidden.detach(), r_branch2)
        r_mid = r_mid + linear_relevance(view.mlp.fc1, t.h2.detach(), r_hidden)
        r_x, r_branch1 = _add_relevance(t.x.detach(), t.branch1.detach(), r_mid)
        if t.attn is None:
            maps.append(None)
            # No head left: the branch is proj's bias, whose share stays there as any bias's does. Attention
            # removed: the branch is LN1(x) token by token, and LayerNorm passes relevance through.
            r = r_x if attn is not None else r_x + r_branch1
            continue
        qk, values = _widths(attn)
        # Zero-padded value slots carry no relevance: their outputs are 0, and the z-rule gives 0 there.
        r_heads = split_heads(linear_relevance(attn.proj, t.heads.detach(), r_branch1), values, attn.head_dim)
        r_attn, r_v = (part / 2 for part in _z_rule(torch.matmul, [t.attn.detach(), t.v.detach()], r_heads))
        maps.append(r_attn)
        r_q, r_k = (part / 2 for part in _z_rule(lambda q, k: q @ k.transpose(-2, -1),
                                                  [t.q.detach(), t.k.detach()], r_attn))
        r = r_x + sum(linear_relevance(linear, t.h1.detach(), part) for linear, part in attn.qkv.pieces(
            merge_heads(r_q, qk), merge_heads(r_k, qk), merge_heads(r_v, values)))
    return maps[::-1], r


def rollouts(layer_maps: list[torch.Tensor], num_prefix_tokens: int) -> torch.Tensor:
    """Row [CLS], patch columns of ``Ā_L ··· Ā_l`` for every start layer ``l``: ``(B, L, patches)``.

    ``layer_maps[l]`` is ``Ā_l`` ``(B, N, N)``; the suffix products share their factors.
    """
    joint, rows = None, []
    for a in reversed(layer_maps):
        joint = a if joint is None else joint @ a
        rows.append(joint[:, 0, num_prefix_tokens:])
    return torch.stack(rows[::-1], dim=1)


def smooth_on_grid(maps: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """Min-max normalise each map and smooth it by [1/8, 3/4, 1/8] along both grid axes (edges replicated).

    This is exactly what the reference code's bilinear upsampling by the patch size, followed by
    averaging each patch's pixels, does to a per-patch map.
    """
    flat = maps.reshape(-1, maps.shape[-1])
    low, high = flat.min(dim=1, keepdim=True).values, flat.max(dim=1, keepdim=True).values
    flat = _safe_divide(flat - low, high - low)
    image = flat.reshape(-1, 1, *grid)
    kernel = torch.tensor([0.125, 0.75, 0.125], dtype=image.dtype, device=image.device)
    image = F.conv2d(F.pad(image, (1, 1, 0, 0), mode="replicate"), kernel.view(1, 1, 1, 3))
    image = F.conv2d(F.pad(image, (0, 0, 1, 1), mode="replicate"), kernel.view(1, 1, 3, 1))
    return image.reshape(maps.shape)


def inter_layer_scores(model: nn.Module, loader: Iterable[tuple[torch.Tensor, torch.Tensor]], *, classes: int = 6,
                       max_images: int | None = None, progress: bool = False,
                       dist: DistContext | None = None) -> torch.Tensor:
    """STAR's static prior ``S_inter`` ``(L, patches)``: per block, the mean LRP importance to go of every patch
    position over images and each image's ``classes`` top predicted classes (float64, on the CPU).

    With ``dist`` every process passes over its own shard (``max_images`` then counts this process's
    images, and a shard may be empty) and the sums and counts are reduced over all processes, so
    every process returns the same scores.
    """
    check_lrp(model)
    adapter = get_adapter(model)
    prefix, grid = adapter.num_prefix_tokens, adapter.grid_size
    device = next(model.parameters()).device
    total = torch.zeros(len(adapter.blocks()), adapter.num_patches, dtype=torch.float64, device=device)
    seen, maps_seen = 0, 0
    was_training = model.training
    try:
        model.eval()
        for images, _ in track_batches(loader, "LRP importance", enabled=progress):
            take = len(images) if max_images is None else min(len(images), max_images - seen)
            if take <= 0:
                break
            with torch.enable_grad():
                logits, traces, readout = traced_forward(model, images[:take].to(device))
                top = logits.topk(min(classes, logits.shape[1]), dim=1).indices
                for rank in range(top.shape[1]):
                    one_hot = F.one_hot(top[:, rank], logits.shape[1]).to(logits.dtype)
                    grads = iter(torch.autograd.grad((logits * one_hot).sum(),
                                                     [t.attn for t in traces if t.attn is not None],
                                                     retain_graph=rank + 1 < top.shape[1]))
                    maps, _ = attention_relevance(model, traces, readout, one_hot)
                    b, n, _ = traces[0].x.shape
                    eye = torch.eye(n, device=device, dtype=logits.dtype).expand(b, n, n)
                    # A block with no head mixes no tokens: its factor is the identity.
                    layer_maps = [eye if m is None else eye + (next(grads) * m).clamp(min=0).mean(dim=1)
                                  for m in maps]
                    total += smooth_on_grid(rollouts(layer_maps, prefix).detach().double(), grid).sum(dim=0)
            seen += take
            maps_seen += take * top.shape[1]
    finally:
        model.train(was_training)
    if dist is not None:
        # One message: the per-process sums with the number of (image, class) maps behind them.
        packed = all_reduce_sum(torch.cat([total.flatten(), total.new_tensor([maps_seen])]))
        total, maps_seen = packed[:-1].view_as(total), int(packed[-1].item())
    if maps_seen == 0:
        raise VitpruneError("inter-layer importance needs at least one image")
    return (total / maps_seen).cpu()
