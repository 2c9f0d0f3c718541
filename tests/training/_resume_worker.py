"""Run by test_resume under torchrun: a fine-tune interrupted mid-epoch on every process and resumed, and the same run
uninterrupted; rank 0 saves the checkpoint's running sums at the interrupt and both runs' weights."""

import sys
from pathlib import Path

import torch
from torch.utils.data import Subset

import vitprune
from vitprune.data import DigitsDataset
from vitprune.training import TrainConfig, Trainer, TrainHooks
from vitprune.training.distributed import exit_distributed, init_distributed
from vitprune.training.engine import CHECKPOINT_DIR, STATE_FILE

#: 128 images, a global batch of 32: 4 steps an epoch, 16 images per process and step.
CONFIG = TrainConfig(epochs=2, lr=0.05, batch_size=32, optimizer="sgd")
#: Ctrl-C before this step: epoch 2, after 2 of its 4 batches.
STOP = 6


class _StopAt(TrainHooks):
    def on_step_start(self, trainer: Trainer) -> None:
        if trainer.step == STOP:
            raise KeyboardInterrupt


def _run(ctx, run_dir: Path, *, hooks: TrainHooks | None = None, resume: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=2)
    Trainer(model, Subset(DigitsDataset("train"), range(128)), CONFIG, run_dir=run_dir, hooks=hooks,
            dist=ctx).fit(resume=resume)
    return model


def _main(out: Path) -> None:
    ctx = init_distributed("cpu")
    reference = _run(ctx, out / "uninterrupted")
    try:
        _run(ctx, out / "resumed", hooks=_StopAt())
    except KeyboardInterrupt:
        pass
    tallies = torch.load(out / "resumed" / CHECKPOINT_DIR / STATE_FILE, weights_only=True)["tally"]
    resumed = _run(ctx, out / "resumed", resume=True)
    if ctx.is_main:
        torch.save({"tallies": tallies, "uninterrupted": reference.state_dict(), "resumed": resumed.state_dict()},
                   out / "result.pt")
    exit_distributed()


if __name__ == "__main__":
    _main(Path(sys.argv[1]))
