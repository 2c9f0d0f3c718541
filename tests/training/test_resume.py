"""Ctrl-C anywhere in a fine-tune, then resume: the weights and every metrics.jsonl line (but its wall times) are bit
for bit an uninterrupted run's, and each epoch's wall time is counted once."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from conftest import run_torchrun
from interrupts import Batches, assert_identical, checkpointed, metrics
from torch.utils.data import Subset

import vitprune
from vitprune.data import DigitsDataset
from vitprune.errors import VitpruneError
from vitprune.training import TrainConfig, finetune_pruned
from vitprune.training.engine import CHECKPOINT_DIR, METRICS_FILE, STATE_FILE

#: 96 images: 3 batches (and steps) an epoch; checkpoints after steps 2 and 4 (mid-epoch) and at each epoch's end.
#: Stochastic depth draws from torch's global RNG, which validation's loader draws from too.
CONFIG = TrainConfig(epochs=2, lr=2e-3, batch_size=32, warmup_epochs=0.5, checkpoint_every=2, drop_path=0.1)


def _finetune(run_dir, *, seed: int = 0, resume: bool = False) -> None:
    torch.manual_seed(seed)
    model = vitprune.create_model("digits-vit", depth=2)
    train = Subset(DigitsDataset("train", augment=True), range(96))
    finetune_pruned(model, train, Subset(DigitsDataset("val"), range(32)), CONFIG, run_dir=run_dir, resume=resume)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    _finetune(run_dir)
    return run_dir


# (epoch, batch) saved by the interrupt: at the first batch, at the first of an epoch, mid-epoch after the checkpoint
# of step 4, and in validation (the epoch done, its line not yet written).
@pytest.mark.parametrize("stop, stop_validation, position", [
    (0, None, (0, 0)), (3, None, (1, 0)), (5, None, (1, 2)), (None, 0, (1, 0)),
], ids=["first-batch", "epoch-start", "mid-epoch", "validation"])
def test_a_resumed_fine_tune_ends_as_an_uninterrupted_one(uninterrupted, tmp_path, monkeypatch, stop,
                                                          stop_validation, position):
    with monkeypatch.context() as patch:
        Batches(patch, stop=stop, stop_validation=stop_validation)
        with pytest.raises(KeyboardInterrupt):
            _finetune(tmp_path)
    state = torch.load(tmp_path / CHECKPOINT_DIR / STATE_FILE, weights_only=True)
    assert (state["epoch"], state["batch"]) == position
    _finetune(tmp_path, seed=1, resume=True)  # another initialisation: everything must come from the checkpoint
    assert_identical(checkpointed(tmp_path), checkpointed(uninterrupted))
    assert metrics(tmp_path) == metrics(uninterrupted)
    assert [line["epoch"] for line in metrics(tmp_path)] == [1, 2]


def test_a_resumed_epoch_counts_its_time_once(tmp_path, monkeypatch):
    """The resumed epoch's seconds add the interrupted call's time up to its last batch to the resumed call's; its
    images per second are all the epoch's images over that time."""
    with monkeypatch.context() as patch:
        Batches(patch, stop=5)
        with pytest.raises(KeyboardInterrupt):
            _finetune(tmp_path)
    state = torch.load(tmp_path / CHECKPOINT_DIR / STATE_FILE, weights_only=True)
    *_, images, before = state["tally"][0].tolist()  # this process's loss sum, hits, images, seconds
    assert images == 64 and before > 0  # batch 5 is the third of epoch 2
    _finetune(tmp_path, resume=True)
    last = json.loads((tmp_path / METRICS_FILE).read_text().splitlines()[-1])
    assert last["seconds"] > before
    assert last["images_per_s"] == 96 / last["seconds"]


def test_a_mid_epoch_checkpoint_resumes_only_on_as_many_processes_as_wrote_it(tmp_path, monkeypatch):
    with monkeypatch.context() as patch:
        Batches(patch, stop=1)
        with pytest.raises(KeyboardInterrupt):
            _finetune(tmp_path)
    path = tmp_path / CHECKPOINT_DIR / STATE_FILE
    state = torch.load(path, weights_only=True)
    state["tally"] = state["tally"].repeat(2, 1)  # as two processes write it
    torch.save(state, path)
    with pytest.raises(VitpruneError, match=re.escape(f"cannot resume {tmp_path} mid-epoch on 1 process(es): its "
                                                      "checkpoint was written by 2; resume it on 2")):
        _finetune(tmp_path, resume=True)


@pytest.mark.slow
def test_under_torchrun_each_process_resumes_its_own_running_sums(tmp_path):
    """2 CPU processes interrupted mid-epoch: the checkpoint holds each one's sums of the epoch so far, and the
    resumed epoch's line equals the uninterrupted run's. (DDP groups its gradients differently on a resumed run's
    first step, so the weights, and the losses after them, agree to rounding rather than bit for bit.)"""
    run_torchrun(Path(__file__).with_name("_resume_worker.py"), str(tmp_path))
    result = torch.load(tmp_path / "result.pt", weights_only=True)
    tallies = result["tallies"]
    assert tallies.shape == (2, 4) and tallies[:, 2].tolist() == [32, 32]  # 2 batches of 16 images on each process
    assert tallies[0, 0] != tallies[1, 0]  # each its own images' loss
    resumed, uninterrupted = metrics(tmp_path / "resumed"), metrics(tmp_path / "uninterrupted")
    assert [line["epoch"] for line in resumed] == [1, 2]
    for got, want in zip(resumed, uninterrupted):
        assert got == {**want, "loss": pytest.approx(want["loss"], abs=1e-5)}
    for name, want in result["uninterrupted"].items():
        assert (result["resumed"][name] - want).abs().max() <= 1e-5, name
