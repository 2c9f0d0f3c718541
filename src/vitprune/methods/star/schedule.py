"""STAR's per-layer keep rates from the average cosine similarity (ACS) of each block's output tokens.

``p_l = 1 − (1−ρ)·(ACS_l − lo)/(hi − lo)``, clipped to ``[ρ, 1]``: layers whose tokens have
become alike keep fewer of them. ``lo, hi`` are ``ACS_1, ACS_L`` (the paper's anchors: ``p_1 = 1``,
``p_L = ρ``) or the minimum and maximum over layers (the reference code's). One knob ``ρ`` sets the
cost; :func:`rho_for_macs` finds the ``ρ`` that meets a MAC budget.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.errors import UnreachableTargetError, VitpruneError
from vitprune.measure import count_macs, format_count
from vitprune.measure.target import MacTarget, goal, reach
from vitprune.methods.star.config import ANCHORS
from vitprune.surgery import prune_tokens, set_token_prior
from vitprune.training.distributed import DistContext, all_reduce_sum
from vitprune.training.progress import track_batches

def average_cosine_similarity(model: nn.Module, loader: Iterable[tuple[torch.Tensor, torch.Tensor]], *,
                              max_images: int | None = 500, progress: bool = False,
                              dist: DistContext | None = None) -> list[float]:
    """Per block, the mean cosine similarity over all pairs of its output tokens ([CLS] included), averaged over images.

    The paper's eq. 5 on the unpruned model, one image at a time: with unit tokens ``x̂_i`` the pair
    sum is ``(‖Σ x̂_i‖² − T)/2``, so no ``T×T`` matrix is formed. ``max_images`` caps the images
    (the paper uses 500). With ``dist`` every process passes over its own shard (``max_images`` then
    counts this process's images) and the sums and image counts are reduced over all processes, so
    every process returns the same values.
    """
    blocks = [view.module for view in get_adapter(model).blocks()]
    sums = torch.zeros(len(blocks), dtype=torch.float64)
    seen = 0

    def hook(index: int):
        def record(_module, _args, output):
            tokens = (output[0] if isinstance(output, tuple) else output).double()
            unit = torch.nn.functional.normalize(tokens, dim=-1)
            t = unit.shape[1]
            pairs = (unit.sum(dim=1).square().sum(dim=-1) - t) / (t * (t - 1))
            sums[index] += pairs.sum().cpu()
        return record

    handles = [b.register_forward_hook(hook(i)) for i, b in enumerate(blocks)]
    device = next(model.parameters()).device
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            for images, _ in track_batches(loader, "average cosine similarity", enabled=progress):
                take = len(images) if max_images is None else min(len(images), max_images - seen)
                if take <= 0:
                    break
                model(images[:take].to(device))
                seen += take
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    if dist is not None:
        packed = all_reduce_sum(torch.cat([sums, sums.new_tensor([seen])]))
        sums, seen = packed[:-1], int(packed[-1].item())
    if seen == 0:
        raise VitpruneError("average cosine similarity needs at least one image")
    return (sums / seen).tolist()


def keep_rates(acs: list[float], rho: float, *, anchor: str = "paper") -> list[float]:
    """Per-layer keep rates ``p_l`` for ``ρ`` (``0 < ρ ≤ 1``), clipped to ``[ρ, 1]``."""
    if not 0 < rho <= 1:
        raise VitpruneError(f"rho must be in (0, 1], got {rho}")
    if anchor not in ANCHORS:
        raise VitpruneError(f"unknown anchor {anchor!r} (choose from: {', '.join(ANCHORS)})")
    lo, hi = (acs[0], acs[-1]) if anchor == "paper" else (min(acs), max(acs))
    if hi <= lo:
        raise VitpruneError(f"the ACS anchors do not increase ({lo:.4f} -> {hi:.4f}): no schedule can be drawn; "
                            "try anchor 'minmax' (--anchor minmax)")
    return [min(1.0, max(rho, 1 - (1 - rho) * (a - lo) / (hi - lo))) for a in acs]


def apply_keep_rates(model: nn.Module, rates: list[float], *, alpha: float, prior: torch.Tensor | None = None,
                     adaptive: bool = False) -> None:
    """Make every block with a rate below 1 prune tokens at that rate (recipe edits); others are left alone.

    ``prior`` ``(L, patches)`` (STAR's inter-layer scores) is installed in each pruning block;
    ``adaptive`` makes them a-STAR blocks. Blocks with no attention head left (attention removed by
    depth pruning, every head removed by HiAP) have no [CLS] attention to rank tokens by: they keep
    all of them, whatever their rate.
    """
    views = get_adapter(model).blocks()
    blocks = len(views)
    if len(rates) != blocks:
        raise VitpruneError(f"{len(rates)} keep rates for a model of {blocks} blocks")
    if prior is not None and prior.shape[0] != blocks:
        raise VitpruneError(f"an inter-layer table of {prior.shape[0]} rows for a model of {blocks} blocks")
    for view, rate in zip(views, rates, strict=True):
        if rate < 1 and view.attn is not None and view.attn.num_heads > 0:
            prune_tokens(model, view.index, rate, alpha=alpha, adaptive=adaptive)
            if prior is not None:
                set_token_prior(model, view.index, prior[view.index])


def rho_for_macs(model: nn.Module, acs: list[float], target: MacTarget, *, anchor: str = "paper",
                 tol: float = 1e-4, above: bool = False) -> float:
    """The largest ``ρ`` whose schedule costs at most ``target`` (:func:`~vitprune.measure.target.reach`); with
    ``above``, the smallest ``ρ`` tried whose schedule still costs more (whole tokens can jump past the target; a
    neuron trim after it reaches the target exactly).

    MACs are counted by :func:`vitprune.measure.count_macs` on a scratch copy with the schedule applied (in the
    target's convention), and do not decrease as ``ρ`` grows, so bisection from ``ρ = 1`` (no pruning) towards
    ``tol`` finds it within ``tol``.
    """
    def macs(rho: float) -> int:
        scratch = copy.deepcopy(model)
        apply_keep_rates(scratch, keep_rates(acs, rho, anchor=anchor), alpha=1.0)
        return count_macs(scratch, convention=target.convention).macs

    return reach(macs, target, model, 1.0, tol, what="STAR's keep-rate schedule", tol=tol, above=above)


def check_reachable(model: nn.Module, target: MacTarget) -> None:
    """Fail before any data pass when no schedule can reach ``target``, or it is at or above the model's MACs: even
    keeping one patch token in every block that can prune (a cheaper schedule than any ``ρ`` gives) costs more."""
    wanted, _ = goal(target, model)
    scratch = copy.deepcopy(model)
    apply_keep_rates(scratch, [1e-9] * len(get_adapter(scratch).blocks()), alpha=1.0)
    floor = count_macs(scratch, convention=target.convention).macs
    if wanted < floor:
        raise UnreachableTargetError(f"STAR's keep-rate schedule cannot reach {format_count(wanted)} MACs per image "
                                     f"({target.convention} convention); the nearest it reaches, one patch token in "
                                     f"every block, is {format_count(floor)}")
