"""Ctrl-C in any stage of HetDPT (a fast fine-tune of Step 1, Step 2's search, Stage 2's fine-tune), then resume: it
continues where it stopped, and the points, predictor, selection, the search's and the fine-tune's weights, every
metrics line (but its wall times), the model and the report are bit for bit an uninterrupted run's."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
import torch
from interrupts import Batches, assert_identical, checkpointed, metrics, weights

import vitprune
from vitprune.data import balanced_subset, build_dataset
from vitprune.errors import VitpruneError
from vitprune.measure import SpeedConfig
from vitprune.methods.hetdpt import HetDPTRun
from vitprune.methods.hetdpt.importance import select_layers
from vitprune.methods.hetdpt.pipeline import (
    FINETUNE_DIR, MODEL_DIR, POINTS_FILE, PREDICTOR_FILE, REPORT_FILE, SEARCH_DIR, SELECTION_FILE, preset, run_hetdpt,
)
from vitprune.runs import MethodData, RunContext
from vitprune.training import TrainConfig
from vitprune.training.engine import CHECKPOINT_DIR

#: 64 training images: 2 batches an epoch. Step 1: 6 fast fine-tunes of 1 batch, on 32 of them (two sweeps of 2
#: rounds, one interleaved round); Step 2 and Stage 2: 2 epochs, the search removing its layers at steps 1 and 2.
TRAIN = TrainConfig(epochs=2, lr=5e-4, batch_size=32)


@pytest.fixture(scope="module")
def setting():
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=2)
    size = vitprune.get_adapter(model).input_size
    calibration = build_dataset("digits", "train", input_size=size, is_training=False)
    train = balanced_subset(build_dataset("digits", "train", input_size=size), 64, seed=0)
    val = balanced_subset(build_dataset("digits", "val", input_size=size, is_training=False), 16, seed=0)
    config = replace(preset("digits"), probe=replace(TRAIN, epochs=1), probe_images=32, te_images=16, search=TRAIN,
                     finetune=TRAIN)
    return model, train, val, calibration, config


def _run(setting, run_dir, *, resume: bool = False) -> None:
    model, train, val, calibration, config = setting
    run_hetdpt(model, MethodData(train, val, calibration), HetDPTRun(2, config=config), RunContext(run_dir,
               speed=SpeedConfig(enabled=False), resume=resume))


@pytest.fixture(scope="module")
def uninterrupted(setting, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    with pytest.MonkeyPatch.context() as patch:
        batches = Batches(patch)
        _run(setting, run_dir)
    return run_dir, batches


def _outcome(run_dir) -> dict:
    """Everything the run wrote but its wall times, the paths in it relative to ``run_dir``."""
    read = {name: json.loads((run_dir / name).read_text().replace(str(run_dir), "RUN"))
            for name in (POINTS_FILE, PREDICTOR_FILE, SELECTION_FILE, REPORT_FILE)}
    del read[REPORT_FILE]["seconds"]
    return {**read, **{f"{name} metrics": metrics(run_dir / name) for name in (SEARCH_DIR, FINETUNE_DIR)}}


# Where the interrupt falls: the stage's runs (by run directory; Step 1's fast fine-tunes keep none), the batch of
# them it falls before, and how many batches of that stage the resumed run trains.
@pytest.mark.parametrize("stage, batch, retrained", [
    # Fine-tune 4 of 6 (the activation sweep's second round): the four points so far are kept; the activation sweep
    # replays its first round and trains its second, then the interleaved sweep its two.
    (None, 3, 4),
    # Batch 2 of 4, right after the search removed its first layer at step 1 (epoch 1 of 2).
    (SEARCH_DIR, 1, 3),
    # Batch 4 of 4 (epoch 2 of 2).
    (FINETUNE_DIR, 3, 1),
], ids=["step-1", "step-2", "stage-2"])
def test_an_interrupted_run_resumes_where_it_stopped_and_ends_as_an_uninterrupted_one(
        setting, uninterrupted, tmp_path, monkeypatch, stage, batch, retrained):
    reference, trained = uninterrupted
    with monkeypatch.context() as patch:
        Batches(patch, stop=trained.numbered(stage)[batch])
        with pytest.raises(KeyboardInterrupt):
            _run(setting, tmp_path)
    if stage is None:
        kept = json.loads((tmp_path / POINTS_FILE).read_text())
        assert kept == json.loads((reference / POINTS_FILE).read_text())[:4]
    else:
        assert (tmp_path / stage / CHECKPOINT_DIR).is_dir()
    with monkeypatch.context() as patch:
        resumed = Batches(patch)
        _run(setting, tmp_path, resume=True)
    assert len(resumed.numbered(stage)) == retrained
    assert _outcome(tmp_path) == _outcome(reference)
    for name in (SEARCH_DIR, FINETUNE_DIR):
        assert_identical(checkpointed(tmp_path / name), checkpointed(reference / name))
    assert_identical(weights(tmp_path / MODEL_DIR), weights(reference / MODEL_DIR))


def test_a_search_resumes_only_for_the_same_removals(setting, tmp_path, monkeypatch):
    model, train, *_ = setting
    with monkeypatch.context() as patch:
        Batches(patch, stop=1)
        with pytest.raises(KeyboardInterrupt):
            select_layers(model, train, TRAIN, attention=1, activation=1, run_dir=tmp_path)
    with pytest.raises(VitpruneError, match=re.escape("cannot resume the layer search: its checkpoint removes "
                                                      "1 attention + 1 activation layers, this run 2 attention + 0 "
                                                      "activation layers")):
        select_layers(model, train, TRAIN, attention=2, activation=0, run_dir=tmp_path, resume=True)
