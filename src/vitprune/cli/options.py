"""Options that several commands share, each defined once with one default.

Three groups are common by rule (README, "Options every command shares"): every command that
loads a model's weights takes :data:`MODEL_GROUP`; every command that times a model takes
:data:`SPEED_GROUP`, whose defaults are :class:`~vitprune.measure.SpeedConfig`'s; every command
that reads a dataset takes :data:`DATA_GROUP`. ``tests/cli/test_options.py`` checks the matrix.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from vitprune.device import AUTO
from vitprune.errors import VitpruneError
from vitprune.measure import CONVENTIONS, SpeedConfig
from vitprune.surgery import IDENTITY_HELP

#: The MAC conventions, from their single source.
Convention = Enum("Convention", {name: name for name in CONVENTIONS}, type=str)


class AttentionIdentity(str, Enum):
    norm = "norm"
    skip = "skip"


PRETRAINED_OPT = typer.Option(True, "--pretrained/--no-pretrained",
                              help="Start a timm or Hugging Face MODEL from its pretrained weights (cached or "
                                   "downloaded; a save_pretrained directory's own).")
CHECKPOINT_OPT = typer.Option(None, "--checkpoint", help="Local weights file (.safetensors/.pth) for a timm MODEL.")
DEVICE_OPT = typer.Option(AUTO, "--device", help="auto (cuda if available, else cpu), cpu, cuda or cuda:N.")
#: The options of every command that loads a model's weights.
MODEL_GROUP = ("--pretrained", "--checkpoint", "--device")

SPEED_OPT = typer.Option(SpeedConfig.enabled, "--speed/--no-speed",
                         help="Time the result against the original (alternating pairs).")
SPEED_BATCH_OPT = typer.Option(SpeedConfig.batch_size, "--speed-batch", min=1,
                               help="Batch of the speed measurement (1: latency; larger: throughput).")
REPEATS_OPT = typer.Option(SpeedConfig.pairs, "--repeats", min=3,
                           help="Timed runs (alternating pairs when two models are compared).")
#: The options of every command that times a model.
SPEED_GROUP = ("--speed", "--speed-batch", "--repeats")

DATA_OPT = typer.Option(..., "--data", help="digits, cluttered-mnist, cifar10, cifar100, or an ImageFolder directory.")
DATA_ROOT_OPT = typer.Option(None, "--data-root", help="Where CIFAR lives (or is downloaded to).")
DOWNLOAD_OPT = typer.Option(False, "--download", help="Download CIFAR if missing (needs network).")
#: The options of every command that reads a dataset (besides --data itself).
DATA_GROUP = ("--data-root", "--download")

JSON_OPT = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")
IDENTITY_OPT = typer.Option(AttentionIdentity.norm, "--identity", help=IDENTITY_HELP)
RESUME_OPT = typer.Option(False, "--resume", help="Continue the run in --out from where it stopped (its finished "
                                                  "stages and last checkpoint).")
OVERWRITE_OPT = typer.Option(False, "--overwrite", help="Replace what is already there (the new one is written "
                                                        "beside it and renamed when complete).")


def speed_config(speed: bool, speed_batch: int, repeats: int) -> SpeedConfig:
    """The speed group's values as the :class:`~vitprune.measure.SpeedConfig` the pipelines take."""
    return SpeedConfig(enabled=speed, batch_size=speed_batch, pairs=repeats)


def distributed(device: str):
    """The process group this command joins under ``torchrun`` (one process outside it), each process on its
    device: ``cuda:LOCAL_RANK`` where --device allows CUDA. The pipelines shard their statistics over it, train
    data-parallel and write from rank 0 (docs/scaling.md)."""
    from vitprune.training.distributed import init_distributed

    return init_distributed(device)


def check_target(path: Path, overwrite: bool, option: str) -> None:
    """Refuse, before any work, to write over an existing ``path`` unless ``overwrite``. Under torchrun rank 0
    looks (join the group first, :func:`distributed`), so no rank finds what rank 0 has just written."""
    from vitprune.training.distributed import on_main

    def check() -> None:
        if path.exists() and not overwrite:
            raise VitpruneError(f"{path} already exists; pass --overwrite to replace it, or choose another {option}")

    on_main(check)
