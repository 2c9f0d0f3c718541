"""One rank of the 2-process gloo run in test_distributed.py: ``torchrun --nproc_per_node 2 _dist_worker.py OUT``.

Every rank builds the same deterministic data, works on its own slice, and sends a report to rank 0,
which adds single-process references computed on the whole data and writes everything to ``OUT`` as JSON.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from vitprune.errors import VitpruneError
from vitprune.training.distributed import (
    all_reduce_sum,
    broadcast_object,
    empty_moments,
    init_distributed,
    is_main_process,
    on_main,
    reduce_metrics,
    reduce_moments,
    exit_distributed,
    unwrap_model,
    welford_update,
    wrap_model,
)

NUM_SAMPLES, NUM_FEATURES, NUM_CLASSES = 50, 6, 3
# Unequal slices, so the merges must weight the ranks by their counts.
MOMENT_SLICES = [slice(0, 18), slice(18, NUM_SAMPLES)]
GLOBAL_BATCH, SGD_STEPS = 8, 3


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1234)
    # An offset far from zero makes a naive sum-of-squares variance visibly inaccurate.
    x = 1000.0 + torch.randn(NUM_SAMPLES, NUM_FEATURES, generator=gen, dtype=torch.float64) * torch.arange(1, 7)
    y = torch.randint(0, NUM_CLASSES, (NUM_SAMPLES,), generator=gen)
    return x, y


def _tiny_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(NUM_FEATURES, 16), nn.GELU(), nn.Linear(16, NUM_CLASSES))


def _train(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for images, targets in batches:
        loss = F.cross_entropy(model(images), targets)  # mean-reduced: DDP averages gradients over ranks
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def _flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _sgd_batches(x: torch.Tensor, y: torch.Tensor, rank: int | None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The global batches of the SGD steps; with ``rank``, only that rank's half of each."""
    xs = (x - 1000.0).float()  # centred inputs keep the tiny model's steps well conditioned
    batches = []
    for step in range(SGD_STEPS):
        start, size = step * GLOBAL_BATCH, GLOBAL_BATCH
        if rank is not None:
            start, size = start + rank * GLOBAL_BATCH // 2, GLOBAL_BATCH // 2
        batches.append((xs[start:start + size], y[start:start + size]))
    return batches


def main(out_path: str) -> None:
    ctx = init_distributed("cpu")
    again = init_distributed("cpu")
    x, y = _data()
    rank = ctx.rank

    # Reductions over this rank's slice.
    rank_tensor = torch.tensor([float(rank), 1.0])
    summed = all_reduce_sum(rank_tensor)
    mine = MOMENT_SLICES[rank]
    scores = x[mine, 0] - 1000.0
    metrics = reduce_metrics({"score": scores.sum().item(), "hits": float((y[mine] == 0).sum())}, len(scores))
    state = empty_moments(NUM_FEATURES)
    for chunk in x[mine].split(5):
        state = welford_update(*state, chunk)
    count, mean, m2 = reduce_moments(*state)
    plan = broadcast_object({"keep": [3, 1, 4], "from": rank}, src=0)
    ran_here = []
    main_result = on_main(lambda: ran_here.append(rank) or {"computed_by": rank})
    main_errors = []
    for failure in (VitpruneError("no space left in the run directory"), OSError("disk full")):
        def _fail(failure=failure):
            raise failure
        try:
            on_main(_fail)
        except Exception as exc:  # rank 0 re-raises its own exception, the others get a VitpruneError
            main_errors.append([type(exc).__name__, str(exc)])

    # DDP: rank 1 starts from other weights on purpose, DDP must replace them with rank 0's.
    model = _tiny_model(seed=rank)
    ddp = wrap_model(model, ctx)
    _train(ddp, _sgd_batches(x, y, rank))
    report = {
        "rank": rank,
        "is_main": ctx.is_main,
        "is_main_process": is_main_process(),
        "context": {"world_size": ctx.world_size, "local_rank": ctx.local_rank, "backend": ctx.backend,
                    "device": str(ctx.device)},
        "idempotent": again == ctx,
        "wrapped": type(ddp).__name__,
        "unwrapped_is_model": unwrap_model(ddp) is model,
        "all_reduce_sum": summed.tolist(),
        "input_untouched": rank_tensor.tolist() == [float(rank), 1.0],
        "metrics": metrics,
        "moments": {"count": count.item(), "mean": mean.tolist(), "m2": m2.tolist()},
        "broadcast": plan,
        "on_main": {"result": main_result, "ran_here": ran_here, "errors": main_errors},
        "params": _flat_params(unwrap_model(ddp)).tolist(),
    }
    reports = [None] * ctx.world_size
    dist.all_gather_object(reports, report)
    if ctx.is_main:
        reference = _tiny_model(seed=0)
        _train(reference, _sgd_batches(x, y, None))
        whole = x - 1000.0
        expected = {
            "metrics": {"score": whole[:, 0].mean().item(), "hits": (y == 0).double().mean().item(),
                        "count": NUM_SAMPLES},
            "moments": {"count": NUM_SAMPLES, "mean": x.mean(dim=0).tolist(),
                        "m2": (x.var(dim=0, correction=0) * NUM_SAMPLES).tolist()},
            "params": _flat_params(reference).tolist(),
            "initial_params": _flat_params(_tiny_model(seed=0)).tolist(),
        }
        with open(out_path, "w") as f:
            json.dump({"reports": reports, "expected": expected}, f)
    exit_distributed()


if __name__ == "__main__":
    main(sys.argv[1])
