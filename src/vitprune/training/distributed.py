"""Multi-process training under torchrun: process-group setup, reductions and DDP wrapping.

Everything here also works, unchanged, in a plain single process: :func:`init_distributed` then
returns a context with ``world_size == 1`` and no process group, the reductions return their
input's values and :func:`wrap_model` returns the model itself. So the training engine and the
pruning methods that gather statistics over data call one code path whether or not they run under
``torchrun --nproc_per_node N``.

The moment helpers (:func:`welford_update`, :func:`merge_moments`, :func:`reduce_moments`) keep
per-feature ``(count, mean, M2)`` statistics, M2 being the sum of squared deviations from the
mean, so the population variance is ``M2 / count``. They are what VBP needs for per-neuron
activation variance over a dataset split across ranks.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset, Subset

from vitprune.device import AUTO, resolve_device
from vitprune.errors import VitpruneError

#: ``(count, mean, M2)``: sample count (a scalar or one per feature), per-feature mean and sum of squared deviations.
Moments = tuple[torch.Tensor, torch.Tensor, torch.Tensor]

_T = TypeVar("_T")

_TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class DistContext:
    """Where this process stands in a (possibly single-process) run."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None  # None when there is no process group

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the only process that writes files and prints."""
        return self.rank == 0


def init_distributed(device: str | None = None) -> DistContext:
    """Join the process group torchrun describes in the environment, or describe a single process.

    With ``WORLD_SIZE`` unset or 1 no process group is created. Otherwise ``RANK``, ``LOCAL_RANK``,
    ``MASTER_ADDR`` and ``MASTER_PORT`` must be set too (torchrun sets them all) and the group uses
    NCCL on CUDA, where each process takes ``cuda:LOCAL_RANK``, and gloo on CPU. ``device`` is
    ``'cpu'`` or ``'cuda'``; the default is CUDA when available. Calling it again, or after someone
    else initialised the default group, reuses the existing group.
    """
    if dist.is_available() and dist.is_initialized():
        local_rank = _env_int("LOCAL_RANK", default=dist.get_rank())
        dev = _pick_device(device, local_rank)
        _use_device(dev)
        return _group_context(dev, local_rank)
    world_size = _env_int("WORLD_SIZE", default=1)
    if world_size < 1:
        raise VitpruneError(f"WORLD_SIZE must be at least 1, got {world_size}")
    if world_size == 1:
        return DistContext(rank=0, world_size=1, local_rank=0, device=_pick_device(device, 0), backend=None)
    if not dist.is_available():
        raise VitpruneError("WORLD_SIZE > 1 but this torch build has no torch.distributed support")
    missing = [name for name in _TORCHRUN_VARS if name not in os.environ]
    if missing:
        raise VitpruneError(f"WORLD_SIZE={world_size} but {', '.join(missing)} not set; launch with torchrun")
    rank, local_rank = _env_int("RANK", default=0), _env_int("LOCAL_RANK", default=0)
    if not 0 <= rank < world_size or local_rank < 0:
        raise VitpruneError(f"bad torchrun environment: RANK={rank} LOCAL_RANK={local_rank} WORLD_SIZE={world_size}")
    dev = _pick_device(device, local_rank)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    if backend == "nccl" and not dist.is_nccl_available():
        raise VitpruneError("CUDA training across processes needs NCCL, which this torch build lacks")
    _use_device(dev)
    dist.init_process_group(backend=backend, init_method="env://", rank=rank, world_size=world_size)
    return _group_context(dev, local_rank)


def shutdown_distributed() -> None:
    """Destroy the default process group, if there is one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def exit_distributed(code: int = 0) -> None:
    """In a process group: destroy it and end this process with ``code`` at once, its output flushed; without one,
    nothing. Left to the interpreter's exit, gloo's threads can abort a worker whose work is done (SIGABRT,
    "terminate called without an active exception"), and torchrun then fails a finished job."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    dist.destroy_process_group()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def is_main_process(ctx: DistContext | None = None) -> bool:
    """Whether this process is rank 0; without ``ctx`` the default process group is asked (no group: True)."""
    if ctx is not None:
        return ctx.is_main
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """The elementwise sum of ``tensor`` over all processes, as a new detached tensor on ``tensor``'s device.

    The input is never modified. Any device works with either backend: the data travels through
    the device the backend needs.
    """
    if not _is_distributed():
        return tensor.detach().clone()
    buffer = tensor.detach().to(_comm_device()).clone(memory_format=torch.contiguous_format)
    dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
    return buffer.to(tensor.device)


def reduce_metrics(sums: dict[str, float], count: int) -> dict[str, float]:
    """Global means from per-process metric sums: ``{name: Σ sums[name] / Σ count, ..., "count": Σ count}``.

    Each process passes the sums over its own samples (e.g. summed loss, number of top-1 hits) and
    its sample count; every process must pass the same names. The reduction runs in float64.
    """
    if "count" in sums:
        raise VitpruneError("'count' is reserved for the sample count and cannot be a metric name")
    # Sorted so that ranks which built their dicts in different orders still line up.
    names = sorted(sums)
    packed = torch.tensor([*(float(sums[name]) for name in names), float(count)], dtype=torch.float64)
    totals = all_reduce_sum(packed)
    total_count = totals[-1]
    if total_count <= 0:
        raise VitpruneError("cannot average metrics over zero samples")
    means = {name: (totals[i] / total_count).item() for i, name in enumerate(names)}
    return {**means, "count": int(total_count.item())}


#: float64 elements per chunk in :func:`welford_update` (1 MiB: stays in a CPU's cache).
_CHUNK_ELEMENTS = 1 << 17


def empty_moments(num_features: int, device: torch.device | str | None = None) -> Moments:
    """The ``(count, mean, M2)`` statistics of no samples, in float64: the starting point for :func:`welford_update`."""
    zeros = torch.zeros(num_features, dtype=torch.float64, device=device)
    return torch.zeros((), dtype=torch.float64, device=device), zeros, zeros.clone()


def welford_update(count: torch.Tensor, mean: torch.Tensor, m2: torch.Tensor, batch: torch.Tensor) -> Moments:
    """Running statistics with ``batch`` folded in, in float64 on ``mean``'s device.

    ``batch`` is ``(..., F)`` with ``F = len(mean)``: every leading index is one sample, so a
    ``(B, T, F)`` block of token activations counts as ``B * T`` samples. The batch's moments come
    from sums of the samples shifted by the running mean (by its first sample when nothing has
    been seen yet), which keeps ``Σd² − (Σd)²/n`` from cancelling, and are merged with
    :func:`merge_moments` (Chan et al.).
    """
    state = _as_moments(count, mean, m2)
    if batch.ndim == 0 or batch.shape[-1] != state[1].shape[0]:
        raise VitpruneError(f"batch of shape {tuple(batch.shape)} does not end in {state[1].shape[0]} features")
    rows = batch.detach().reshape(-1, batch.shape[-1])
    if rows.shape[0] == 0:
        return state
    device = state[1].device
    shift = torch.where(state[0] > 0, state[1], rows[0].to(device=device, dtype=torch.float64))
    total, squares = torch.zeros_like(shift), torch.zeros_like(shift)
    # On a CPU, converting the whole batch to float64 at once made the statistics pass memory-bound
    # (1.5x plain inference on DeiT-T); cache-sized chunks avoid that. A GPU wants one big kernel.
    step = rows.shape[0] if rows.is_cuda else max(1, _CHUNK_ELEMENTS // rows.shape[1])
    for chunk in rows.split(step):
        # Type promotion casts and subtracts in one float64 pass, into a new tensor (the input is never written).
        shifted = torch.sub(chunk.to(device), shift)
        total += shifted.sum(0)
        squares += shifted.mul_(shifted).sum(0)
    n = torch.tensor(float(rows.shape[0]), dtype=torch.float64, device=device)
    batch_m2 = (squares - total.square() / n).clamp_(min=0)
    return merge_moments(state, (n, shift + total / n, batch_m2))


def merge_moments(a: Moments, b: Moments) -> Moments:
    """The ``(count, mean, M2)`` statistics of the union of two disjoint sample sets (Chan et al.'s parallel formula).

    Pure and elementwise: ``count`` may be a scalar or one per feature. Counts are sample counts,
    so a non-empty set has a count of at least 1; two empty sets merge to an empty set. It computes
    in the dtype it is given: pass float64, as :func:`welford_update` and :func:`reduce_moments` do.
    """
    (count_a, mean_a, m2_a), (count_b, mean_b, m2_b) = a, b
    count = count_a + count_b
    delta = mean_b - mean_a
    # clamp keeps 0 / 0 (both sets empty) from turning the statistics into NaN.
    share_b = count_b / count.clamp(min=1)
    return count, mean_a + delta * share_b, m2_a + m2_b + delta.square() * count_a * share_b


def reduce_moments(count: torch.Tensor, mean: torch.Tensor, m2: torch.Tensor) -> Moments:
    """Merge every process's ``(count, mean, M2)`` into the global statistics, identical on all ranks, in float64.

    The shapes must agree across processes. Ranks are merged in rank order with
    :func:`merge_moments`, so every process gets bit-identical results.
    """
    local = _as_moments(count, mean, m2)
    if not _is_distributed():
        return local
    shapes = [t.shape for t in local]
    flat = torch.cat([t.reshape(-1) for t in local]).to(_comm_device())
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    per_rank = []
    for part in gathered:
        pieces = part.to(local[1].device).split([s.numel() for s in shapes])
        per_rank.append(tuple(p.reshape(s) for p, s in zip(pieces, shapes)))
    return functools.reduce(merge_moments, per_rank)


def broadcast_object(obj: _T, src: int = 0) -> _T:
    """Rank ``src``'s ``obj`` on every process (pickled; meant for small objects such as a pruning plan)."""
    world_size = dist.get_world_size() if _is_distributed() else 1
    if not 0 <= src < world_size:
        raise VitpruneError(f"cannot broadcast from rank {src} with {world_size} process(es)")
    if world_size == 1:
        return obj
    box = [obj if dist.get_rank() == src else None]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def on_main(fn: Callable[[], _T]) -> _T:
    """``fn()`` run on rank 0 alone, its (picklable, small) result returned on every rank.

    For what one process must do for all: create or check a run directory, write a file, time a model.
    A :class:`VitpruneError` raised there is raised on every rank with the same message, and any other
    exception stops the others with a one-line error naming it, so no rank is left waiting in a later
    collective for a process that failed. In one process it is ``fn()``.
    """
    if not _is_distributed():
        return fn()
    outcome: tuple[str, object] | None = None
    failure: BaseException | None = None
    if dist.get_rank() == 0:
        try:
            outcome = ("ok", fn())
        except VitpruneError as exc:
            outcome, failure = ("error", str(exc)), exc
        except Exception as exc:
            outcome, failure = ("error", f"rank 0 failed: {type(exc).__name__}: {exc}"), exc
    kind, value = broadcast_object(outcome)
    if failure is not None:
        raise failure
    if kind == "error":
        raise VitpruneError(str(value))
    return value  # type: ignore[return-value]


def shard_dataset(dataset: Dataset, ctx: DistContext | None) -> Dataset:
    """This process's share of ``dataset`` for a statistics pass: every ``world_size``-th item from ``rank`` on.

    Unlike training's sampler there is no padding: the shares are disjoint and together hold every
    item once, so per-process sums reduced with :func:`all_reduce_sum` (or moments with
    :func:`reduce_moments`) equal one pass over ``dataset``. A share may be empty. Choose the
    images first (e.g. a seeded subset), then shard, so the set does not depend on the world size.
    Without ``ctx``, or in one process, ``dataset`` itself.
    """
    if ctx is None or ctx.world_size == 1:
        return dataset
    return Subset(dataset, range(ctx.rank, len(dataset), ctx.world_size))


def wrap_model(model: nn.Module, ctx: DistContext, *, find_unused_parameters: bool = False) -> nn.Module:
    """``model`` moved to ``ctx.device`` and, with several processes, wrapped in DistributedDataParallel.

    DDP copies rank 0's parameters and buffers to every rank on construction and averages
    gradients over ranks during ``backward``, so use a mean-reduced loss. Set
    ``find_unused_parameters`` when some parameters may get no gradient in a step.
    """
    model.to(ctx.device)
    if ctx.world_size == 1:
        return model
    if not (dist.is_available() and dist.is_initialized()):
        raise VitpruneError("context has several processes but no process group; create it with init_distributed()")
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=find_unused_parameters)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The plain module inside DDP and/or ``torch.compile`` wrappers (``model`` itself when unwrapped)."""
    while True:
        if isinstance(model, DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod"):  # torch.compile's OptimizedModule
            model = model._orig_mod
        else:
            return model


def _env_int(name: str, *, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise VitpruneError(f"environment variable {name}={raw!r} is not an integer") from None


def _pick_device(device: str | None, local_rank: int) -> torch.device:
    dev = resolve_device(device if device is not None else AUTO)
    if dev.type != "cuda":
        return dev
    if dev.index is not None and dev.index != local_rank:
        raise VitpruneError(f"device {device!r} conflicts with LOCAL_RANK {local_rank}; pass 'cuda' instead")
    visible = torch.cuda.device_count()
    if local_rank >= visible:
        raise VitpruneError(f"LOCAL_RANK {local_rank} needs cuda:{local_rank} but {visible} CUDA device(s) are visible")
    return torch.device("cuda", local_rank)


def _use_device(dev: torch.device) -> None:
    # NCCL, DDP and broadcast_object use the current CUDA device; without this every rank would share cuda:0.
    if dev.type == "cuda":
        torch.cuda.set_device(dev)


def _group_context(dev: torch.device, local_rank: int) -> DistContext:
    return DistContext(
        rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank, device=dev,
        backend=str(dist.get_backend()),
    )


def _is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _comm_device() -> torch.device:
    # NCCL only moves CUDA tensors; gloo is used here for CPU tensors only.
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _as_moments(count: torch.Tensor | int, mean: torch.Tensor, m2: torch.Tensor) -> Moments:
    if mean.ndim != 1 or m2.shape != mean.shape:
        raise VitpruneError(f"moments need 1-D mean and M2 of one shape, got {tuple(mean.shape)} and {tuple(m2.shape)}")
    as64 = functools.partial(torch.as_tensor, dtype=torch.float64, device=mean.device)
    count = as64(count)
    if count.ndim > 1 or (count.ndim == 1 and count.shape != mean.shape):
        raise VitpruneError(f"count must be a scalar or of shape {tuple(mean.shape)}, not {tuple(count.shape)}")
    return count, as64(mean), as64(m2)


__all__ = [
    "DistContext", "Moments", "all_reduce_sum", "broadcast_object", "empty_moments", "exit_distributed",
    "init_distributed", "is_main_process", "merge_moments", "on_main", "reduce_metrics", "reduce_moments",
    "shard_dataset", "shutdown_distributed", "unwrap_model", "welford_update", "wrap_model",
]
