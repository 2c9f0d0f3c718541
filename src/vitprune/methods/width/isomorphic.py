"""Isomorphic (and plain global) width pruning: torch-pruning decides, vitprune's recorded edits cut.

torch-pruning traces the model, groups the channels that must go together (the residual stream's
embedding channels, each block's heads and head dimensions, each FFN's neurons) and ranks them with
an importance criterion; with ``isomorphic`` the ranking is global within groups of the same shape
(Isomorphic Pruning, Fang et al. 2024, the width step of HetDPT+). Attention loses whole heads and
head dimensions together, as Isomorphic Pruning's own scripts prune DeiT. It plans on a copy. The plan is
then applied to the model with :func:`~vitprune.surgery.prune_embed_dims`, ``prune_heads``,
``prune_head_dims`` and ``prune_mlp_neurons``, so it lands in the recipe and the model saves and
loads without pickle. The result equals torch-pruning's own pruned model (tested).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.measure import count_macs
from vitprune.measure.target import MacTarget, reach
from vitprune.methods.width.config import IMPORTANCES, WIDTH_WITHOUT, check_attention_shares, width_requirements
from vitprune.surgery import prune_embed_dims, prune_head_dims, prune_heads, prune_mlp_neurons
from vitprune.training.distributed import all_reduce_sum


def _torch_pruning():
    try:
        import torch_pruning
    except ImportError:
        raise VitpruneError("width pruning needs torch-pruning: pip install 'vitprune[width]'") from None
    return torch_pruning


@dataclass
class WidthPlan:
    """What to keep: embedding channels (``None``: all), and per block the heads, head offsets and FFN neurons
    (blocks absent from a dict keep all of that kind)."""

    embed: list[int] | None = None
    heads: dict[int, list[int]] = field(default_factory=dict)
    head_dims: dict[int, list[int]] = field(default_factory=dict)
    neurons: dict[int, list[int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (block keys as strings)."""
        return {"embed": self.embed, **{name: {str(b): k for b, k in getattr(self, name).items()}
                                        for name in ("heads", "head_dims", "neurons")}}


class NoHeadLeftError(VitpruneError):
    """A width ratio that would remove every head of some block."""


def _check_supported(model: nn.Module, embed: bool, heads: float, head_dims: float) -> None:
    adapter = get_adapter(model)
    adapter.require(*width_requirements(embed, heads, head_dims), by="width pruning", without=WIDTH_WITHOUT)
    for view in adapter.blocks():
        if view.token_op is not None:
            raise UnsupportedArchitectureError(f"{view.name} reduces tokens; prune width before tokens")
        if view.attn is not None and (view.attn.value_dims is not None or view.attn.gate is not None):
            raise UnsupportedArchitectureError(f"{view.name}.attn has uneven or gated heads; torch-pruning cannot "
                                               "trace it (prune width before HiAP or depth gates)")
        if view.mlp.gate is not None:
            raise UnsupportedArchitectureError(f"{view.name}.mlp is gated; remove the depth gates first")


def plan_width(model: nn.Module, ratio: float, *, importance: str = "magnitude", isomorphic: bool = True,
               heads: float = 1.0, head_dims: float = 0.5, embed: bool = True, round_to: int | None = None,
               batches: Iterable[tuple[torch.Tensor, torch.Tensor]] = (),
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
               gradients: dict[str, torch.Tensor] | None = None) -> WidthPlan:
    """Ask torch-pruning which channels to remove at ``ratio`` (its per-group channel ratio, ranked globally).

    Attention is pruned as Isomorphic Pruning prunes DeiT (its scripts: head ratio = ratio, head-dimension ratio =
    ratio / 2): ``heads × ratio`` of all heads go, ranked across blocks, and the heads left lose the same
    ``head_dims × ratio`` of their dimensions (0 turns either off; ``head_dims=1`` ranks head dimensions with the
    other channels at ``ratio``). ``embed=False`` keeps the residual stream whole. ``round_to`` makes every kept
    width a multiple of it (torch-pruning's ``round_to``): CPU and GPU matmul kernels run widths such as 317 or
    47 far slower per MAC than 320 or 48. ``taylor`` importance reads ``gradients`` (:func:`taylor_gradients`'
    sums; computed once, they serve every plan of a bisection), or accumulates those of ``loss_fn`` (cross-entropy
    by default) over ``batches``. The model itself is not changed. A ratio that would remove
    every head of a block is a :class:`NoHeadLeftError`.
    """
    tp = _torch_pruning()
    if importance not in IMPORTANCES:
        raise VitpruneError(f"unknown importance {importance!r} (choose from: {', '.join(IMPORTANCES)})")
    if not 0.0 <= ratio < 1.0:
        raise VitpruneError(f"width ratio must be in [0, 1), got {ratio}")
    check_attention_shares(heads, head_dims)
    _check_supported(model, embed, heads, head_dims)
    work = copy.deepcopy(model).eval()
    adapter = get_adapter(work)
    views = adapter.blocks()
    example = torch.randn(1, *adapter.input_size, device=next(work.parameters()).device)
    ignored = list(adapter.classifier_heads())
    if not embed:
        ignored += adapter.stream_writers
    _hide_head_parameters(views)
    # torch-pruning groups the q, k and v rows of a head; the query rows (first in a fused layout) name the head.
    attn = {v.attn.qkv.linears[0]: v.index for v in views if v.attn is not None}
    linears = tuple(linear for v in views if v.attn is not None for linear in v.attn.qkv.linears)
    with warnings.catch_warnings():
        # Per-channel scales (LayerScale's and ConvNeXt's gamma) are parameters of no layer torch-pruning knows; it
        # warns, then cuts their one dimension, which is the right one.
        warnings.filterwarnings("ignore", message="Unwrapped parameters detected", category=UserWarning)
        pruner = tp.pruner.MetaPruner(
            work, example, importance=_importance(tp, importance), global_pruning=True, isomorphic=isomorphic,
            pruning_ratio=ratio, ignored_layers=ignored, round_to=round_to,
            num_heads={linear: v.attn.num_heads for v in views if v.attn is not None for linear in v.attn.qkv.linears},
            prune_num_heads=heads > 0, head_pruning_ratio=heads * ratio, prune_head_dims=head_dims > 0,
            # Head dimensions at their own ratio: one scope over every block's q, k and v. torch-pruning removes heads
            # only from groups whose scope removes some channels, so heads alone rank in the ordinary scopes.
            pruning_ratio_dict={linears: head_dims * ratio} if linears and 0 < head_dims < 1 else None,
            # The token and position embeddings: torch-pruning must cut their channel dimension.
            unwrapped_parameters=[(p, 2) for p in adapter.token_parameters()])
    if importance == "taylor":
        _set_gradients(work, gradients if gradients is not None else taylor_gradients(work, batches, loss_fn))
    fc1 = {v.mlp.fc1: v.index for v in views if not v.mlp.merged}
    plan = WidthPlan()
    for group in pruner.step(interactive=True):
        removed = {}
        for dep, idxs in group:
            if "out_channels" in dep.handler.__name__:
                removed.setdefault(dep.target.module, sorted(int(i) for i in idxs))
        if adapter.stem in removed:
            plan.embed = _complement(removed[adapter.stem], adapter.embed_dim)
        elif q := next((m for m in removed if m in attn), None):
            _plan_attention(plan, views[attn[q]], removed[q])
        elif fc := next((m for m in removed if m in fc1), None):
            plan.neurons[fc1[fc]] = _complement(removed[fc], fc.out_features)
    # torch-pruning counts a block's heads down, then leaves the block whole when none would be left.
    emptied = [views[b].name for q, b in attn.items() if pruner.num_heads[q] <= 0]
    if emptied:
        raise NoHeadLeftError(f"width ratio {ratio:.4g} with heads={heads} removes every head of "
                              f"{', '.join(emptied)}; lower the ratio or heads")
    return plan


def _hide_head_parameters(views) -> None:
    """Make the planning copy's per-head parameters (Swin's bias table) buffers: torch-pruning would couple their
    head columns with the heads' channels and give up on the group; ``prune_heads`` slices them itself."""
    for view in views:
        if view.attn is None:
            continue
        for param in view.attn.head_parameters:
            name = next(n for n, p in view.attn.module.named_parameters(recurse=False) if p is param)
            delattr(view.attn.module, name)
            view.attn.module.register_buffer(name, param.detach())


def _importance(tp, name: str):
    if name == "taylor":
        return tp.importance.GroupTaylorImportance()
    return tp.importance.GroupMagnitudeImportance(p=1)


def taylor_gradients(model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
                     loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
                     ) -> dict[str, torch.Tensor]:
    """The gradient of ``loss_fn`` (cross-entropy by default), summed over ``batches``, of every trainable parameter
    of ``model`` by name: what taylor importance multiplies the weights by. Under torchrun each process passes its
    share of the batches and every process gets the sums over all of them (one all-reduce). ``model``'s own
    gradients are left as they were."""
    loss_fn = loss_fn or nn.functional.cross_entropy
    work = copy.deepcopy(model).eval()
    device = next(work.parameters()).device
    work.zero_grad()
    seen = 0
    for images, labels in batches:  # kept off the accelerator until used: thousands of images at 224 px are GBs
        loss_fn(work(images.to(device)), labels.to(device)).backward()
        seen += 1
    params = [(name, p) for name, p in work.named_parameters() if p.requires_grad]
    # A process whose share is empty still takes part in the reduction, with zeros.
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for _, p in params]
                     + [torch.tensor([float(seen)], device=device)])
    flat = all_reduce_sum(flat)
    if flat[-1].item() == 0:
        raise VitpruneError("taylor importance needs at least one batch of data")
    sums, offset = {}, 0
    for name, p in params:
        sums[name] = flat[offset:offset + p.numel()].view_as(p)
        offset += p.numel()
    return sums


def taylor_scores(model: nn.Module, gradients: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """torch-pruning's taylor importance of every channel group of ``model`` (the classifier left out), in its
    dependency graph's order, from ``gradients`` (:func:`taylor_gradients`): what ``taylor`` importance ranks by."""
    tp = _torch_pruning()
    work = copy.deepcopy(model).eval()
    adapter = get_adapter(work)
    example = torch.randn(1, *adapter.input_size, device=next(work.parameters()).device)
    graph = tp.DependencyGraph().build_dependency(
        work, example, unwrapped_parameters=[(p, 2) for p in adapter.token_parameters()])
    _set_gradients(work, gradients)
    importance = tp.importance.GroupTaylorImportance()
    return [importance(group) for group in graph.get_all_groups(ignored_layers=list(adapter.classifier_heads()),
                                                                root_module_types=[nn.Linear, nn.Conv2d])]


def _set_gradients(model: nn.Module, gradients: dict[str, torch.Tensor]) -> None:
    for name, param in model.named_parameters():  # frozen ones have none (the hidden head parameters are buffers)
        param.grad = gradients.get(name)


def _complement(removed: list[int], size: int) -> list[int]:
    gone = set(removed)
    return [i for i in range(size) if i not in gone]


def _plan_attention(plan: WidthPlan, view, removed: list[int]) -> None:
    """Read torch-pruning's removed query rows as whole heads and the same offsets in every head left."""
    attn = view.attn
    hd, width = attn.head_dim, attn.attn_dim
    by_head: dict[int, set[int]] = {}
    for r in removed:
        if r < width:
            by_head.setdefault(r // hd, set()).add(r % hd)
    left = [h for h in range(attn.num_heads) if len(by_head.get(h, ())) < hd]
    offsets = {frozenset(by_head.get(h, ())) for h in left}
    if len(offsets) != 1:
        raise VitpruneError(f"{view.name}: torch-pruning removed different dimensions in different heads, "
                            "which a uniform attention cannot hold")
    if len(left) < attn.num_heads:
        plan.heads[view.index] = left
    if dims := next(iter(offsets)):
        plan.head_dims[view.index] = _complement(sorted(dims), hd)


def apply_width(model: nn.Module, plan: WidthPlan) -> None:
    """Carry out ``plan`` on ``model`` with recorded edits."""
    for block, keep in plan.heads.items():
        prune_heads(model, block, keep)
    for block, keep in plan.head_dims.items():
        prune_head_dims(model, block, keep)
    for block, keep in plan.neurons.items():
        prune_mlp_neurons(model, block, keep)
    if plan.embed is not None and len(plan.embed) < get_adapter(model).embed_dim:
        prune_embed_dims(model, plan.embed)


def prune_width(model: nn.Module, ratio: float, **options: Any) -> WidthPlan:
    """:func:`plan_width` then :func:`apply_width`, in place; returns the plan."""
    plan = plan_width(model, ratio, **options)
    apply_width(model, plan)
    return plan


def prune_width_to_macs(model: nn.Module, target: MacTarget, *, steps: int = 14, above: bool = False,
                        **options: Any) -> tuple[float, WidthPlan]:
    """Prune ``model`` in place at the smallest ratio whose result costs at most ``target`` (counted in its
    convention); with ``above``, at the largest ratio tried whose result still costs more, for a finer step (a neuron
    trim) to reach the target exactly: width ratios move in whole heads and channels, which can jump past it.

    The ratio is found by bisection over ``[0, 0.95]`` (:func:`~vitprune.measure.target.reach`), planning on copies
    (``options`` as for :func:`plan_width`); a ratio that would remove every head of a block counts as too far (the
    heads removed only grow with the ratio). Returns the ratio and its plan. A target at or above the model's own
    MACs is one line; one below what ratio 0.95 (or the largest ratio that leaves every block a head) reaches is an
    :class:`~vitprune.errors.UnreachableTargetError`.
    """
    plans: dict[float, WidthPlan] = {0.0: WidthPlan()}

    def cost(ratio: float) -> int | None:
        trial = copy.deepcopy(model)
        try:
            plans[ratio] = prune_width(trial, ratio, **options)
        except NoHeadLeftError:
            return None
        return count_macs(trial, convention=target.convention).macs

    found = reach(cost, target, model, 0.0, 0.95, what="width pruning", steps=steps, above=above,
                  beyond="every width ratio that reaches it removes every head of some block; lower heads")
    apply_width(model, plans[found])
    return found, plans[found]
