"""The distributed layer: single-process identities, exact moment merging, and a real 2-process gloo run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import TORCHRUN_VARS, run_torchrun
from torch import nn

from vitprune.errors import VitpruneError
from vitprune.training import distributed
from vitprune.training.distributed import (
    DistContext,
    all_reduce_sum,
    broadcast_object,
    empty_moments,
    init_distributed,
    is_main_process,
    merge_moments,
    on_main,
    reduce_metrics,
    reduce_moments,
    shard_dataset,
    shutdown_distributed,
    unwrap_model,
    welford_update,
    wrap_model,
)

WORKER = Path(__file__).with_name("_dist_worker.py")


@pytest.fixture
def no_torchrun_env(monkeypatch):
    for name in TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)


def _samples(n: int = 40, features: int = 5) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    # Far from zero on purpose: a naive sum-of-squares variance would lose most digits here.
    return 1e4 + torch.randn(n, features, generator=gen, dtype=torch.float64) * torch.arange(1, features + 1)


def _whole(x: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
    return len(x), x.mean(dim=0), x.var(dim=0, correction=0) * len(x)


def _assert_moments(got, expected) -> None:
    count, mean, m2 = got
    assert count.dtype == mean.dtype == m2.dtype == torch.float64
    assert count.item() == expected[0]
    torch.testing.assert_close(mean, expected[1], rtol=1e-13, atol=0)
    torch.testing.assert_close(m2, expected[2], rtol=1e-10, atol=0)


# ---------------------------------------------------------------- single process


@pytest.mark.parametrize("world_size", [None, "1"])
def test_single_process_context(no_torchrun_env, monkeypatch, world_size):
    if world_size is not None:
        monkeypatch.setenv("WORLD_SIZE", world_size)
    ctx = init_distributed("cpu")
    assert ctx == DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend=None)
    assert ctx.is_main and is_main_process(ctx) and is_main_process()
    assert not torch.distributed.is_initialized()
    shutdown_distributed()  # nothing to shut down: a no-op


def test_single_process_reductions_are_identities(no_torchrun_env):
    x = torch.tensor([1.0, -2.0, 3.5])
    summed = all_reduce_sum(x)
    assert summed is not x and torch.equal(summed, x)
    assert reduce_metrics({"top1": 3.0, "loss": 6.0}, 4) == {"loss": 1.5, "top1": 0.75, "count": 4}
    plan = {"keep": [0, 2]}
    assert broadcast_object(plan) is plan
    count, mean, m2 = reduce_moments(torch.tensor(3), torch.tensor([1.0, 2.0]), torch.tensor([0.5, 4.0]))
    assert count.item() == 3 and mean.tolist() == [1.0, 2.0] and m2.tolist() == [0.5, 4.0]
    assert mean.dtype == torch.float64
    assert on_main(lambda: plan) is plan
    with pytest.raises(OSError, match="disk full"):  # one process: the exception itself, untouched
        on_main(lambda: (_ for _ in ()).throw(OSError("disk full")))


def test_single_process_wrap_is_the_model(no_torchrun_env):
    model = nn.Linear(3, 2)
    assert wrap_model(model, init_distributed("cpu")) is model
    assert unwrap_model(model) is model


def test_welford_over_batches_equals_whole_data():
    x = _samples()
    state = empty_moments(x.shape[1])
    for chunk in x.split(7):  # uneven last chunk
        state = welford_update(*state, chunk)
    _assert_moments(state, _whole(x))


def test_welford_leaves_the_batch_alone_and_chunks_exactly(monkeypatch):
    x = _samples(n=33)
    before = x.clone()
    whole = welford_update(*empty_moments(5), x)
    assert torch.equal(x, before)  # float64 input: the shifted copy must not alias it
    monkeypatch.setattr(distributed, "_CHUNK_ELEMENTS", 20)  # 4 rows per chunk, uneven last one
    _assert_moments(welford_update(*empty_moments(5), x), _whole(x))
    _assert_moments(whole, _whole(x))


def test_welford_counts_every_token_as_a_sample():
    x = _samples(n=24)
    state = welford_update(*empty_moments(5), x.reshape(4, 6, 5))
    _assert_moments(state, _whole(x))


def test_welford_ignores_empty_batches():
    x = _samples(n=10)
    state = welford_update(*empty_moments(5), x)
    _assert_moments(welford_update(*state, x[:0]), _whole(x))


def test_merge_of_two_halves_equals_whole():
    x = _samples()
    first = welford_update(*empty_moments(5), x[:13])
    second = welford_update(*empty_moments(5), x[13:])
    _assert_moments(merge_moments(first, second), _whole(x))
    _assert_moments(merge_moments(second, first), _whole(x))


def test_merge_with_empty_set_is_identity():
    x = _samples(n=9)
    state = welford_update(*empty_moments(5), x)
    _assert_moments(merge_moments(empty_moments(5), state), _whole(x))
    _assert_moments(merge_moments(state, empty_moments(5)), _whole(x))
    count, mean, m2 = merge_moments(empty_moments(5), empty_moments(5))
    assert count.item() == 0 and not mean.any() and not m2.any()


def test_merge_accepts_per_feature_counts():
    x = _samples(n=12, features=2)
    a = (torch.tensor([5.0, 5.0], dtype=torch.float64), *_whole(x[:5])[1:])
    b = (torch.tensor([7.0, 7.0], dtype=torch.float64), *_whole(x[5:])[1:])
    count, mean, m2 = merge_moments(a, b)
    assert count.tolist() == [12.0, 12.0]
    _assert_moments((torch.tensor(12.0, dtype=torch.float64), mean, m2), _whole(x))


@pytest.mark.parametrize("length, world_size", [(7, 2), (10, 3), (2, 3)])
def test_shards_are_disjoint_and_cover_the_dataset_in_order(length, world_size):
    data = list(range(length))
    shards = [shard_dataset(data, DistContext(rank, world_size, rank, torch.device("cpu"), "gloo"))
              for rank in range(world_size)]
    assert [list(s) for s in shards] == [data[rank::world_size] for rank in range(world_size)]  # some may be empty
    assert sorted(i for s in shards for i in s) == data
    assert shard_dataset(data, None) is data
    assert shard_dataset(data, DistContext(0, 1, 0, torch.device("cpu"), None)) is data


def test_user_mistakes_raise_one_line_errors(no_torchrun_env, monkeypatch):
    with pytest.raises(VitpruneError, match="reserved"):
        reduce_metrics({"count": 1.0}, 1)
    with pytest.raises(VitpruneError, match="zero samples"):
        reduce_metrics({"loss": 0.0}, 0)
    with pytest.raises(VitpruneError, match="does not end in 5 features"):
        welford_update(*empty_moments(5), torch.zeros(3, 4))
    with pytest.raises(VitpruneError, match="count must be a scalar"):
        reduce_moments(torch.ones(2, 2), torch.zeros(2), torch.zeros(2))
    with pytest.raises(VitpruneError, match="rank 1"):
        broadcast_object("plan", src=1)
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(VitpruneError, match="WORLD_SIZE='two' is not an integer"):
        init_distributed("cpu")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(VitpruneError, match="RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT not set; launch with torchrun"):
        init_distributed("cpu")
    for name, value in [("RANK", "2"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "1")]:
        monkeypatch.setenv(name, value)
    with pytest.raises(VitpruneError, match="RANK=2"):
        init_distributed("cpu")
    assert not torch.distributed.is_initialized()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_without_cuda_is_a_user_error(no_torchrun_env):
    with pytest.raises(VitpruneError, match="CUDA is not available"):
        init_distributed("cuda")


# ---------------------------------------------------------------- two processes


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    """Runs the worker under ``torchrun --nproc_per_node 2`` (gloo, loopback only) and returns its JSON."""
    out = tmp_path_factory.mktemp("dist") / "out.json"
    run_torchrun(WORKER, str(out), timeout=180)
    return json.loads(out.read_text())


@pytest.mark.slow
def test_two_ranks_contexts(two_rank_run):
    reports = two_rank_run["reports"]
    assert [r["rank"] for r in reports] == [0, 1]
    assert [r["is_main"] for r in reports] == [True, False]
    assert [r["is_main_process"] for r in reports] == [True, False]
    for rank, r in enumerate(reports):
        assert r["context"] == {"world_size": 2, "local_rank": rank, "backend": "gloo", "device": "cpu"}
        assert r["idempotent"]


@pytest.mark.slow
def test_two_ranks_reductions(two_rank_run):
    expected = two_rank_run["expected"]
    for r in two_rank_run["reports"]:
        assert r["all_reduce_sum"] == [1.0, 2.0]  # ranks 0 + 1, and 1 + 1
        assert r["input_untouched"]
        assert r["broadcast"] == {"keep": [3, 1, 4], "from": 0}
        assert r["metrics"].keys() == expected["metrics"].keys()
        assert r["metrics"]["count"] == 50
        assert r["metrics"]["hits"] == pytest.approx(expected["metrics"]["hits"], rel=1e-15)
        assert r["metrics"]["score"] == pytest.approx(expected["metrics"]["score"], rel=1e-12)
        assert r["moments"]["count"] == 50
        assert r["moments"]["mean"] == pytest.approx(expected["moments"]["mean"], rel=1e-14)
        assert r["moments"]["m2"] == pytest.approx(expected["moments"]["m2"], rel=1e-10)
    # Merged in rank order on every rank: bit-identical results.
    assert two_rank_run["reports"][0]["moments"] == two_rank_run["reports"][1]["moments"]


@pytest.mark.slow
def test_two_ranks_on_main_runs_once_and_fails_everywhere(two_rank_run):
    reports = two_rank_run["reports"]
    assert [r["on_main"]["ran_here"] for r in reports] == [[0], []]
    assert [r["on_main"]["result"] for r in reports] == [{"computed_by": 0}] * 2
    # Rank 0 re-raises what it caught; the others raise one line with its message, so none waits forever.
    assert reports[0]["on_main"]["errors"] == [["VitpruneError", "no space left in the run directory"],
                                               ["OSError", "disk full"]]
    assert reports[1]["on_main"]["errors"] == [["VitpruneError", "no space left in the run directory"],
                                               ["VitpruneError", "rank 0 failed: OSError: disk full"]]


@pytest.mark.slow
def test_two_ranks_ddp_matches_one_process_on_the_global_batch(two_rank_run):
    expected = torch.tensor(two_rank_run["expected"]["params"])
    initial = torch.tensor(two_rank_run["expected"]["initial_params"])
    assert (expected - initial).abs().max() > 1e-2  # the steps did move the weights
    for r in two_rank_run["reports"]:
        assert r["wrapped"] == "DistributedDataParallel" and r["unwrapped_is_model"]
        # Rank 1 started from other weights: DDP broadcast rank 0's, then averaged the half-batch gradients.
        torch.testing.assert_close(torch.tensor(r["params"]), expected, rtol=0, atol=1e-6)
