"""Run by test_hetdpt_distributed under torchrun: HetDPT's TE, Step-2 search and pipeline, images sharded.

Each rank saves what it computed to ``OUT/rank{r}.pt`` and runs the pipeline in ``OUT/run{r}`` (a directory of
its own, so the test can see which rank wrote what), then resumes it with every statistics pass and training
disabled. The test imports :func:`setting`, :func:`statistics` and the constants to compute the same in one process.
"""

import sys
from dataclasses import replace
from pathlib import Path

import torch
from torch.utils.data import Subset

import vitprune
from vitprune.data import balanced_subset, build_dataset
from vitprune.measure import SpeedConfig
from vitprune.methods.hetdpt import LAYER_TYPES, collect, pipeline, transfer_entropy
from vitprune.methods.hetdpt import HetDPTRun
from vitprune.methods.hetdpt.importance import select_layers
from vitprune.methods.hetdpt.pipeline import HetDPTConfig
from vitprune.runs import MethodData, RunContext
from vitprune.runs.stages import calibration_loader
from vitprune.training import TrainConfig
from vitprune.training.distributed import DistContext, exit_distributed, init_distributed

#: 23 TE images split 12 + 11 over two ranks, in batches of 4 (a partial batch on each rank).
TE_IMAGES, TE_BATCH = 23, 4
#: One step of a global batch of 16 on 16 images. SGD, not Adam: Adam turns rounding-sized gradients that are zero in
#: exact arithmetic into lr-sized updates (see test_engine's 2-process test).
STEP = TrainConfig(epochs=1, lr=0.05, batch_size=16, optimizer="sgd", amp=False)
#: Every stage on 32 training images (two steps per fine-tune): 6 predictor points on a model of depth 2, Step 2
#: with the TE shortlist, Stage 2.
HETDPT = replace(HetDPTConfig(), probe=STEP, te_images=TE_IMAGES, sweep_layers=2, interleaved_rounds=1, search=STEP,
                 finetune=STEP)
SPEED = SpeedConfig(enabled=False)


def setting():
    """The model, calibration images (evaluation transform), 32 training images and 12 validation images."""
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=2)
    size = vitprune.get_adapter(model).input_size
    calibration = build_dataset("digits", "train", input_size=size, is_training=False)
    val = balanced_subset(build_dataset("digits", "val", input_size=size, is_training=False), 12, seed=0)
    return model, calibration, Subset(calibration, range(32)), val


def statistics(model, calibration, dist: DistContext | None) -> dict:
    """TE of every layer, each process over its share of the images, and one Step-2 step of a global batch of 16."""
    loader = calibration_loader(calibration, TE_IMAGES, TE_BATCH, 0, dist=dist)
    te = {kind: transfer_entropy(model, kind, loader, dist=dist) for kind in LAYER_TYPES}
    search = select_layers(model, Subset(calibration, range(16)), STEP, attention=1, activation=1, device="cpu",
                           dist=dist)
    return {"te": te, "importance": search.importance, "history": search.history,
            "removed": (search.attention, search.activation), "weights": search.model.state_dict()}


def _main(out: Path) -> None:
    ctx = init_distributed("cpu")
    model, calibration, train, val = setting()
    result = statistics(model, calibration, ctx)
    shares = []  # images of each TE pass this process sees in the pipeline (Step 1's, then Step 2's)

    def spy(dataset, *args, **kwargs):
        loader = calibration_loader(dataset, *args, **kwargs)
        shares.append(len(loader.dataset))
        return loader

    collect.calibration_loader = pipeline.calibration_loader = spy
    run_dir = out / f"run{ctx.rank}"
    report = pipeline.run_hetdpt(model, MethodData(train, val, calibration), HetDPTRun(2, config=HETDPT),
                                 RunContext(run_dir, speed=SPEED, dist=ctx))
    # Rank 0 created its own directory for both (prepare_run_dir): rank 1's does not even exist.
    result["written"] = sorted(p.name for p in run_dir.iterdir()) if run_dir.exists() else None
    if ctx.is_main:  # the resumed run below saves over it
        result["model"] = vitprune.load(run_dir / pipeline.MODEL_DIR).state_dict()

    def disabled(*_args, **_kwargs):
        raise AssertionError("resuming recomputed a stage that rank 0 had saved")

    # Rank 1's directory holds nothing: resuming there works only if rank 0 reads the stages and sends them on.
    pipeline.collect_predictor_data = pipeline.select_layers = pipeline.transfer_entropy = disabled
    resumed = pipeline.run_hetdpt(model, MethodData(train, val, calibration), HetDPTRun(2, config=replace(HETDPT,
                                  finetune=None)), RunContext(run_dir, speed=SPEED, dist=ctx, resume=True))
    result.update(report=report.to_dict(), resumed=resumed.to_dict(), shares=shares)
    torch.save(result, out / f"rank{ctx.rank}.pt")
    exit_distributed()


if __name__ == "__main__":
    _main(Path(sys.argv[1]))
