"""Run by test_star_distributed under torchrun: STAR's ACS, LRP prior and pipeline with the images sharded.

Each rank saves what it computed to ``OUT/rank{r}.pt`` and runs the pipeline in ``OUT/run{r}`` (a directory of
its own, so the test can see which rank wrote what), then resumes it with the statistics passes disabled. The
test imports :func:`setting` and the constants to compute the same things in one process.
"""

import sys
from pathlib import Path

import torch

import vitprune
from vitprune.data import balanced_subset, build_dataset
from vitprune.measure import SpeedConfig
from vitprune.methods.star import pipeline
from vitprune.methods.star.lrp import inter_layer_scores
from vitprune.methods.star.pipeline import STARConfig
from vitprune.methods.star.schedule import average_cosine_similarity
from vitprune.runs import MethodData, RunContext
from vitprune.runs.stages import calibration_loader
from vitprune.training.distributed import DistContext, exit_distributed, init_distributed

#: 23 ACS images split 12 + 11 over two ranks; 7 LRP images 4 + 3, in batches of 3 (a partial batch on each rank).
ACS_IMAGES, ACS_BATCH, LRP_IMAGES, LRP_BATCH, CLASSES = 23, 8, 7, 3, 3
STAR = STARConfig(rho=0.5, alpha=0.3, acs_images=ACS_IMAGES, lrp_images=LRP_IMAGES, classes=2, calibration_batch=4,
                  finetune=None, anchor="minmax")
SPEED = SpeedConfig(enabled=False)


def setting():
    """The model, calibration images (evaluation transform) and validation images, the same in every process."""
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=2)
    size = vitprune.get_adapter(model).input_size
    calibration = build_dataset("digits", "train", input_size=size, is_training=False)
    val = balanced_subset(build_dataset("digits", "val", input_size=size, is_training=False), 12, seed=0)
    return model, calibration, val


def statistics(model, calibration, dist: DistContext | None) -> dict:
    """The ACS and the LRP prior straight from their functions, each process over its share of the images."""
    acs_loader = calibration_loader(calibration, ACS_IMAGES, ACS_BATCH, 0, dist=dist)
    lrp_loader = calibration_loader(calibration, LRP_IMAGES, LRP_BATCH, 0, dist=dist)
    return {"acs": average_cosine_similarity(model, acs_loader, dist=dist),
            "scores": inter_layer_scores(model, lrp_loader, classes=CLASSES, dist=dist)}


def _main(out: Path) -> None:
    ctx = init_distributed("cpu")
    model, calibration, val = setting()
    result = statistics(model, calibration, ctx)
    applied = []
    apply_keep_rates = pipeline.apply_keep_rates

    def spy(pruned, rates, **kwargs):
        applied.append({"rates": list(rates), "prior": kwargs["prior"].clone()})
        apply_keep_rates(pruned, rates, **kwargs)

    def disabled(*_args, **_kwargs):
        raise AssertionError("resuming recomputed a statistic that rank 0 had saved")

    pipeline.apply_keep_rates = spy
    run_dir = out / f"run{ctx.rank}"
    report = pipeline.run_star(model, MethodData(calibration, val, calibration), STAR,
                               RunContext(run_dir, speed=SPEED, dist=ctx))
    # prepare_run_dir creates rank 0's directory only, so rank 1's may not exist.
    result["written"] = sorted(p.name for p in run_dir.iterdir()) if run_dir.exists() else []
    # Rank 1's directory holds no statistics: resuming there works only if rank 0's reach it.
    pipeline.average_cosine_similarity = pipeline.inter_layer_scores = disabled
    resumed = pipeline.run_star(model, MethodData(calibration, val, calibration), STAR,
                                RunContext(run_dir, resume=True, speed=SPEED, dist=ctx))
    result.update(report={"acs": report.acs, "rho": report.rho, "keep_rates": report.keep_rates},
                  resumed_acs=resumed.acs, applied=applied)
    torch.save(result, out / f"rank{ctx.rank}.pt")
    exit_distributed()


if __name__ == "__main__":
    _main(Path(sys.argv[1]))
