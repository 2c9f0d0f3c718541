"""Ctrl-C in-process: a KeyboardInterrupt raised where a real one most often lands, and what a run left on disk to
compare with an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import safetensors.torch

from vitprune.recipe import WEIGHTS_FILE
from vitprune.training.engine import CHECKPOINT_DIR, METRICS_FILE, MODEL_DIR, Trainer

#: The metrics that measure the machine's speed rather than the run; every other field must match exactly.
WALL_TIME = ("seconds", "images_per_s")


class Batches:
    """Record the run directory of every micro-batch any :class:`Trainer` trains (``None``: a run without one), and
    raise KeyboardInterrupt inside training instead of the batch numbered ``stop`` (0-based, counted over every
    Trainer of the process) or as validation number ``stop_validation`` (0-based) starts."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, stop: int | None = None,
                 stop_validation: int | None = None) -> None:
        self.run_dirs: list[Path | None] = []
        validations = []
        train, validate = Trainer._forward_backward, Trainer._validate

        def counted(trainer: Trainer, images, targets):
            if len(self.run_dirs) == stop:
                raise KeyboardInterrupt
            self.run_dirs.append(trainer.run_dir)
            return train(trainer, images, targets)

        def validated(trainer: Trainer):
            if len(validations) == stop_validation:
                raise KeyboardInterrupt
            validations.append(trainer.epoch)
            return validate(trainer)

        monkeypatch.setattr(Trainer, "_forward_backward", counted)
        monkeypatch.setattr(Trainer, "_validate", validated)

    def numbered(self, name: str | None) -> list[int]:
        """The numbers of the batches trained in runs whose directory is called ``name`` (``None``: no directory)."""
        return [i for i, d in enumerate(self.run_dirs) if (d.name if d is not None else None) == name]


def metrics(run_dir: Path) -> list[dict]:
    """``run_dir``'s metrics.jsonl, one dict per line, without the wall-time fields."""
    lines = (run_dir / METRICS_FILE).read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in WALL_TIME} for line in lines]


def weights(path: Path) -> dict:
    """The tensors of a safetensors file, or of a saved model directory's weights."""
    return safetensors.torch.load_file(path if path.is_file() else path / WEIGHTS_FILE)


def checkpointed(run_dir: Path) -> dict:
    """The weights of ``run_dir``'s last checkpoint."""
    return weights(run_dir / CHECKPOINT_DIR / MODEL_DIR)


def assert_identical(got: dict, want: dict) -> None:
    """The same names, every tensor bit for bit."""
    assert list(got) == list(want)
    different = [name for name in want if not (got[name].dtype == want[name].dtype and got[name].equal(want[name]))]
    assert not different, f"differ: {different}"
