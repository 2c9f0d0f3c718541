"""Run by test_vbp_distributed under torchrun: VBP's scores and pipeline, and run_depth, over 2 processes.

Each rank runs the VBP pipeline in ``OUT/run{r}`` (a directory of its own, so the test can see which rank wrote
what), with one SGD fine-tuning step, then resumes it there without fine-tuning and with the statistics passes
disabled; it runs ``run_depth`` into ``OUT/depth{r}``, and saves what it computed to ``OUT/rank{r}.pt``. The test
imports :func:`setting`, :func:`scores`, :func:`spies` and the constants to compute the same things in one process.
"""

import sys
from dataclasses import replace
from pathlib import Path

import torch

import vitprune
from vitprune.data import balanced_subset, build_dataset
from vitprune.measure import SpeedConfig
from vitprune.methods.depth import DepthConfig, run_depth
from vitprune.methods.vbp import pipeline
from vitprune.methods.vbp.criteria import neuron_scores
from vitprune.methods.vbp.pipeline import VBPConfig
from vitprune.runs import MethodData, RunContext
from vitprune.runs.stages import calibration_loader
from vitprune.training import TrainConfig
from vitprune.training.distributed import DistContext, exit_distributed, init_distributed

#: 21 calibration images split 11 + 10 over two ranks, in batches of 4 (a partial batch on each rank).
CALIBRATION_IMAGES, BATCH = 21, 4
#: 8 training images, global batch 8: one SGD step, 4 images per rank (Adam would amplify rounding differences).
TRAIN_IMAGES = 8
TRAIN = TrainConfig(epochs=1, lr=0.05, batch_size=TRAIN_IMAGES, optimizer="sgd", amp=False)
VBP = VBPConfig(ratio=0.4, calibration_images=CALIBRATION_IMAGES, calibration_batch=BATCH, finetune=TRAIN)
SPEED = SpeedConfig(enabled=False)
DEPTH = DepthConfig(attention=[1], activation=[0])
DEPTH_SPEED = SpeedConfig(batch_size=2, pairs=2, warmup=1)


def setting():
    """The model, calibration images (evaluation transform), training and validation images, alike in every process.

    The training images are unaugmented so that one process and two draw the same batch.
    """
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=2)
    size = vitprune.get_adapter(model).input_size
    calibration = build_dataset("digits", "train", input_size=size, is_training=False)
    train = balanced_subset(calibration, TRAIN_IMAGES, seed=1)
    val = balanced_subset(build_dataset("digits", "val", input_size=size, is_training=False), 12, seed=0)
    return model, calibration, train, val


def scores(model, calibration, dist: DistContext | None) -> dict:
    """The data-driven criteria straight from :func:`neuron_scores`, each process over its share of the images."""
    loader = calibration_loader(calibration, CALIBRATION_IMAGES, BATCH, 0, dist=dist)
    return {criterion: neuron_scores(model, criterion, loader, dist=dist)
            for criterion in ("variance", "pre-variance", "snip")}


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def spies(runs: list[dict]) -> dict:
    """Stand-ins for the pipeline's ``prune_by_selection`` and ``recover`` that append to ``runs`` what each run
    pruned with (selection, statistics), the weights right after pruning and after recovery."""
    prune, recover = pipeline.prune_by_selection, pipeline.recover

    def prune_by_selection(model, removed, stats=None):
        prune(model, removed, stats)
        runs.append({"removed": removed, "pruned": _weights(model),
                     "stats": {b: (s.count, s.mean.cpu(), s.var.cpu()) for b, s in (stats or {}).items()}})

    def recovered(stages, model, *args, **kwargs):
        top1 = recover(stages, model, *args, **kwargs)
        runs[-1]["recovered"] = _weights(model)
        return top1

    return {"prune_by_selection": prune_by_selection, "recover": recovered}


def _main(out: Path) -> None:
    ctx = init_distributed("cpu")
    model, calibration, train, val = setting()
    result = scores(model, calibration, ctx)
    runs: list[dict] = []
    for name, fn in spies(runs).items():
        setattr(pipeline, name, fn)
    run_dir = out / f"run{ctx.rank}"
    report = pipeline.run_vbp(model, MethodData(train, val, calibration), VBP,
                              RunContext(run_dir, speed=SPEED, dist=ctx))
    result["written"] = sorted(p.name for p in run_dir.iterdir()) if run_dir.exists() else None
    result["saved"] = _weights(vitprune.load(run_dir / pipeline.MODEL_DIR)) if ctx.is_main else None

    def disabled(*_args, **_kwargs):
        raise AssertionError("resuming recomputed what rank 0 had saved")

    # Rank 1's directory holds nothing: resuming there works only if rank 0's files reach it. (The fine-tune's
    # checkpoint is read by every rank, so it is left out here: that needs a directory all ranks share.)
    pipeline.mlp_statistics = pipeline.neuron_scores = disabled
    resumed = pipeline.run_vbp(model, MethodData(train, val, calibration), replace(VBP, finetune=None),
                               RunContext(run_dir, resume=True, speed=SPEED, dist=ctx))
    depth = run_depth(model, MethodData(), DEPTH, RunContext(out / f"depth{ctx.rank}", speed=DEPTH_SPEED, dist=ctx))
    result.update(runs=runs, report=report.to_dict(), resumed=resumed.to_dict(), depth=depth.to_dict())
    torch.save(result, out / f"rank{ctx.rank}.pt")
    exit_distributed()


if __name__ == "__main__":
    _main(Path(sys.argv[1]))
