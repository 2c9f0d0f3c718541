"""Run by test_width_distributed under torchrun: taylor width pruning and a chain over 2 processes.

Each rank computes taylor gradients and scores over its share of the batches, runs ``run_width`` (taylor, to a MAC
target) into ``OUT/width{r}`` (a directory of its own, so the test can see which rank wrote what), and runs a chain
(taylor width pruning, then one SGD fine-tuning step) in the shared ``OUT/chain``, twice: the second run resumes the
finished chain. Every file rank 1 moves into place under ``OUT`` is recorded, so the test can check it wrote
none. Each rank saves what it computed to ``OUT/rank{r}.pt``. The test imports :func:`setting`, :func:`gradients`
and the constants to compute the same things in one process.
"""

import os
import sys
from pathlib import Path

import torch

import vitprune
from vitprune.data import balanced_subset, build_dataset
from vitprune.measure import SpeedConfig, count_macs
from vitprune.methods.width import WidthConfig, run_width, taylor_gradients, taylor_scores
from vitprune.methods.width.pipeline import _taylor_batches
from vitprune.runs import ChainConfig, MethodData, RunContext
from vitprune.runs.chain import run_chain
from vitprune.runs.steps import Step
from vitprune.training.distributed import DistContext, exit_distributed, init_distributed

#: 5 taylor batches of 12 images: 3 on rank 0, 2 on rank 1.
TAYLOR = {"taylor_batches": 5, "taylor_batch_size": 12}
SPEED = SpeedConfig(enabled=False)
#: 8 training images, global batch 8: one SGD step, 4 images per rank.
FINETUNE = {"epochs": 1, "lr": 0.05, "batch_size": 8, "optimizer": "sgd", "amp": False, "distill": "soft",
            "alpha": 0.5}
STEPS = [Step("width", {"ratio": 0.3, "importance": "taylor", **TAYLOR}), Step("finetune", FINETUNE)]


def setting():
    """The model, calibration images (evaluation transform), training and validation images, alike in every process.
    The training images are unaugmented so that one process and two draw the same batch."""
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=2)
    size = vitprune.get_adapter(model).input_size
    calibration = build_dataset("digits", "train", input_size=size, is_training=False)
    train = balanced_subset(calibration, 8, seed=1)
    val = balanced_subset(build_dataset("digits", "val", input_size=size, is_training=False), 12, seed=0)
    return model, calibration, train, val


def width_config(model) -> WidthConfig:
    """Taylor importance to 70% of the model's full MACs."""
    return WidthConfig(target_macs=0.7 * count_macs(model).macs, importance="taylor", **TAYLOR)


def gradients(model, calibration, dist: DistContext | None) -> dict[str, torch.Tensor]:
    """Taylor gradients over this process's share of the batches, summed over the processes."""
    return taylor_gradients(model, _taylor_batches(calibration, TAYLOR["taylor_batches"],
                                                   TAYLOR["taylor_batch_size"], WidthConfig.seed, dist, []))


def _record_writes(out: Path) -> list[str]:
    """Every path under ``out`` this process moves into place (how vitprune finishes each file it writes)."""
    written: list[str] = []
    replace = os.replace

    def recording(src, dst, *args, **kwargs):
        if Path(dst).resolve().is_relative_to(out.resolve()):
            written.append(str(dst))
        return replace(src, dst, *args, **kwargs)

    os.replace = recording
    return written


def _main(out: Path) -> None:
    ctx = init_distributed("cpu")
    torch.set_num_threads(1)
    written = _record_writes(out)
    model, calibration, train, val = setting()
    grads = gradients(model, calibration, ctx)
    result = {"gradients": grads, "scores": taylor_scores(model, grads)}
    result["width"] = run_width(model, MethodData(calibration=calibration), width_config(model),
                                RunContext(out / f"width{ctx.rank}", speed=SPEED, dist=ctx)).to_dict()
    chain = run_chain(model, MethodData(train, val, calibration), ChainConfig(STEPS, onnx=False),
                      RunContext(out / "chain", speed=SPEED, dist=ctx)).to_dict()
    result["chain"] = chain
    result["chain_weights"] = vitprune.load(out / "chain" / "model").state_dict()
    result["resumed"] = run_chain(model, MethodData(train, val, calibration), ChainConfig(STEPS, onnx=False),
                                  RunContext(out / "chain", speed=SPEED, dist=ctx, resume=True)).to_dict()
    result["written"] = written
    torch.save(result, out / f"rank{ctx.rank}.pt")
    exit_distributed()


if __name__ == "__main__":
    _main(Path(sys.argv[1]))
