"""A dry run of each ``imagenet-*`` preset: a synthetic ImageNet-shaped image folder (1,000 classes, one training
image and one validation image each, 224 px JPEGs) through ``vitprune prune hetdpt``, ``vbp``, ``star`` and
``hiap`` under ``torchrun --nproc_per_node 2`` on CPU, with the preset's whole recipe (its augmentations, repeated
augmentation, mixup and cutmix, distillation, schedules) for one epoch of a few steps per stage, interrupted once a
stage has written its file and resumed from there."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_torchrun, torchrun_command
from PIL import Image

import vitprune
from vitprune.recipe import RUN_MODEL_DIR
from vitprune.training.presets import PRESETS

CLASSES, TRAIN_PER_CLASS, SIZE = 1000, 1, 224
#: Global batch 256: 4 optimisation steps per epoch of the 1,000 training images (the last one partial, 116 images per
#: process), 128 images per process (mixup and cutmix pair the images of a batch: they need an even number).
BATCH = "256"

#: Per command: its arguments after MODEL, DATA and --out, and the stage file to interrupt after (the run is stopped
#: once it exists, and resuming must keep what it held).
COMMANDS = {
    "hetdpt": (["prune", "hetdpt", "-k", "2", "--preset", "imagenet-hetdpt", "--probe-epochs", "1",
                "--search-epochs", "1", "--epochs", "1", "--probe-images", "256", "--te-images", "64", "-b", BATCH],
               "predictor.json"),
    "vbp": (["prune", "vbp", "--preset", "imagenet-vbp", "--ratio", "0.5", "--calibration-images", "64",
             "--epochs", "1", "-b", BATCH], "selection.json"),
    # "minmax": the untrained model's ACS does not grow with depth, as the paper's anchors need.
    "star": (["prune", "star", "--preset", "imagenet-star", "--rho", "0.7", "--anchor", "minmax", "--acs-images", "32",
              "--lrp-images", "16", "--epochs", "1", "-b", BATCH], "schedule.json"),
    # One training phase (weights and gates), stopped after its first epoch and resumed from its checkpoint.
    "hiap": (["prune", "hiap", "--preset", "imagenet-hiap", "--epochs", "2", "-b", BATCH], "search/metrics.jsonl"),
}


def test_the_dry_run_covers_every_imagenet_preset():
    """The hetdpt command runs the three HetDPT presets (Step 1's, Step 2's and Stage 2's)."""
    covered = {args[args.index("--preset") + 1] for args, _ in COMMANDS.values()}
    covered |= {"imagenet-hetdpt-step1", "imagenet-hetdpt-step2"}
    assert covered == {name for name in PRESETS if name.startswith("imagenet-")}


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory) -> Path:
    """``train/`` and ``val/`` with 1,000 class folders of random 224 px JPEGs (each class a colour of its own)."""
    root = tmp_path_factory.mktemp("imagenet")
    rng = np.random.default_rng(0)
    for split, count in (("train", TRAIN_PER_CLASS), ("val", 1)):
        for c in range(CLASSES):
            folder = root / split / f"n{c:08d}"
            folder.mkdir(parents=True)
            tint = rng.integers(0, 256, 3)
            for i in range(count):
                pixels = (rng.integers(0, 128, (SIZE, SIZE, 3)) + tint // 2).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.jpg", quality=75)
    return root


@pytest.fixture(scope="module")
def tiny_imagenet_vit(tmp_path_factory) -> Path:
    """A 4-block ViT for 224 px, 1,000 classes, at 13 MMACs (patch 32, width 48), saved by vitprune."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("model") / "vit"
    vitprune.save(vitprune.create_model("deit_tiny_patch16_224", depth=4, embed_dim=48, num_heads=3, patch_size=32),
                  path)
    return path


def _args(command: str, model: Path, data: Path, out: Path) -> list[str]:
    args, _ = COMMANDS[command]
    return [*args[:2], str(model), *args[2:], "--data", str(data), "--out", str(out), "--workers", "1",
            "--no-speed", "--json", "--device", "cpu"]


def _interrupted_after(args: list[str], stage_file: Path, timeout: float = 600) -> None:
    """Start ``vitprune ARGS`` under torchrun (2 CPU processes) and stop it as a cluster's preemption would (SIGTERM
    to the launcher, which terminates both ranks) once ``stage_file`` exists."""
    command, env = torchrun_command("-m", "vitprune", *args)
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not stage_file.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    running = proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert running, f"the run ended before {stage_file.name} was written and it could be interrupted:\n{stderr}"
    assert proc.returncode != 0


def _assert_follows(train: dict, preset, *, epochs: int) -> None:
    """``train`` (a report's TrainConfig) is ``preset``'s recipe for ``epochs`` at the global batch, the lr scaled."""
    assert train["epochs"] == epochs and train["batch_size"] == int(BATCH)
    assert train["lr"] == pytest.approx(preset.base_lr * int(BATCH) / 512)
    for field in ("optimizer", "weight_decay", "warmup_epochs", "min_lr", "auto_augment", "re_prob", "mixup_alpha",
                  "cutmix_alpha", "aug_repeats", "label_smoothing", "drop_path", "ema_decay"):
        assert train[field] == getattr(preset.train, field), (preset.name, field)


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_imagenet_preset_runs_under_torchrun_and_resumes_after_an_interruption(command, imagenet,
                                                                                  tiny_imagenet_vit, tmp_path):
    out = tmp_path / "run"
    args = _args(command, tiny_imagenet_vit, imagenet, out)
    stage_file = out / COMMANDS[command][1]
    _interrupted_after(args, stage_file)
    written = stage_file.read_bytes()
    assert not (out / RUN_MODEL_DIR).exists()  # nothing looks finished
    report = json.loads(run_torchrun("-m", "vitprune", *args, "--resume", timeout=900).stdout)
    assert stage_file.read_bytes().startswith(written)  # read back (an epoch log: continued), not recomputed
    # HiAP trains once (its train settings); the others' last stage is the fine-tune, and HetDPT's Steps 1 and 2
    # train with their own presets.
    trained = {args[args.index("--preset") + 1]: report["train"] if command == "hiap" else report["config"]["finetune"]}
    if command == "hetdpt":
        trained |= {"imagenet-hetdpt-step1": report["config"]["probe"],
                    "imagenet-hetdpt-step2": report["config"]["search"]}
    for name, train in trained.items():
        _assert_follows(train, PRESETS[name], epochs=2 if command == "hiap" else 1)
    model = vitprune.load(report.get("model_dir", out / RUN_MODEL_DIR))
    assert model(torch.randn(1, 3, SIZE, SIZE)).shape == (1, CLASSES)
