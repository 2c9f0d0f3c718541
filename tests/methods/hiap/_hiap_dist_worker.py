"""Run by test_hiap_distributed under torchrun: the HiAP pipeline with the training data-parallel.

Each rank runs the pipeline in ``OUT/run{r}`` (a directory of its own, so the test can see which rank wrote what)
and saves its report to ``OUT/rank{r}.pt``; then both resume rank 0's finished run (a run directory every process
reads, as under torchrun). The test imports :func:`setting` and the constants to run the same in one process.
"""

import sys
from pathlib import Path

import torch

import vitprune
from vitprune.data import balanced_subset, build_dataset
from vitprune.measure import SpeedConfig
from vitprune.methods.hiap import HiAPConfig, run_hiap
from vitprune.methods.hiap import HiAPRun
from vitprune.runs import MethodData, RunContext
from vitprune.training import TrainConfig
from vitprune.training.distributed import exit_distributed, init_distributed

#: Two steps of a global batch of 16. SGD, not Adam: Adam turns rounding-sized gradients that are zero in exact
#: arithmetic into lr-sized updates (see test_engine's 2-process test).
TRAIN = TrainConfig(epochs=1, lr=0.05, batch_size=16, optimizer="sgd", amp=False)
#: Gates that start near 0, so that the two steps close some heads and extraction cuts them out.
HIAP = HiAPConfig(gate_lr=0.5, gate_init=0.05)
SPEED = SpeedConfig(enabled=False)


def setting():
    """The model, 32 training images and 12 validation images (evaluation transform: no random augmentation)."""
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=2)
    size = vitprune.get_adapter(model).input_size
    train, val = (balanced_subset(build_dataset("digits", split, input_size=size, is_training=False), count, seed=0)
                  for split, count in (("train", 32), ("val", 12)))
    return model, train, val


def _main(out: Path) -> None:
    ctx = init_distributed("cpu")
    model, train, val = setting()
    run_dir = out / f"run{ctx.rank}"
    report = run_hiap(model, MethodData(train, val), HiAPRun(TRAIN, HIAP), RunContext(run_dir, speed=SPEED, dist=ctx))
    # Rank 0 created its own directory for both (prepare_run_dir): rank 1's does not even exist.
    written = sorted(p.name for p in run_dir.iterdir()) if run_dir.exists() else None
    resumed = run_hiap(model, MethodData(train, val), HiAPRun(TRAIN, HIAP), RunContext(out / "run0", speed=SPEED,
                       dist=ctx, resume=True))
    torch.save({"report": report.to_dict(), "resumed": resumed.to_dict(), "written": written},
               out / f"rank{ctx.rank}.pt")
    exit_distributed()


if __name__ == "__main__":
    _main(Path(sys.argv[1]))
