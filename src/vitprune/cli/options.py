"""Options that several commands share, each defined once with one default.

Four groups are common by rule (README, "Options every command shares"): every command that
loads a model's weights takes :data:`MODEL_GROUP`; every command that times a model takes
:data:`SPEED_GROUP`, whose defaults are :class:`~vitprune.measure.SpeedConfig`'s; every command
that reads a dataset takes :data:`DATA_GROUP`, and every one that can train a new head
:data:`CLASSES_GROUP`. ``tests/cli/test_options.py`` checks the matrix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional, TypeVar

import typer

from vitprune.cli.config_options import bundle, config_options, option
from vitprune.config import SEED_HELP, setting
from vitprune.device import AUTO
from vitprune.errors import VitpruneError
from vitprune.measure import CONVENTIONS, SpeedConfig
from vitprune.surgery import IDENTITY_HELP
from vitprune.training.presets import FinetuneOptions  # noqa: F401  (the fine-tune group, beside the recipes it changes)

if TYPE_CHECKING:
    from torch import nn

F = TypeVar("F", bound=Callable[..., Any])

#: The MAC conventions, from their single source.
Convention = Enum("Convention", {name: name for name in CONVENTIONS}, type=str)


class AttentionIdentity(str, Enum):
    norm = "norm"
    skip = "skip"


@dataclass
class ModelSource:
    """Where MODEL's weights come from and where it runs: the model group of every command that loads weights."""

    pretrained: bool = setting(True, flag="--pretrained/--no-pretrained",
                               help="Start a timm or Hugging Face MODEL from its pretrained weights (cached or "
                                    "downloaded; a save_pretrained directory's own).")
    checkpoint: Optional[Path] = setting(None, help="Local weights file (.safetensors/.pth) for a timm MODEL.")
    device: str = setting(AUTO, help="auto (cuda if available, else cpu), cpu, cuda or cuda:N.")


@dataclass
class DataSource:
    """The dataset a command reads: --data and the data group."""

    data: Optional[str] = setting(None, help="digits, cluttered-mnist, cifar10, cifar100, or an ImageFolder "
                                             "directory.")
    data_root: Optional[Path] = setting(None, help="Where CIFAR lives (or is downloaded to).")
    download: bool = setting(False, flag="--download", help="Download CIFAR if missing (needs network).")
    val_split: Optional[float] = setting(None, help="Validate on this fraction of each class of a flat image folder "
                                                    "(one without train/ and val/ folders), the same images every "
                                                    "run (drawn with seed 0); the others train.")


_JSON_HELP = "Print machine-readable JSON instead of tables."


@dataclass
class RunOutput:
    """What a command that writes a run directory does with one that holds a run, and how it prints."""

    resume: bool = setting(False, flag="--resume", help="Continue the run in --out from where it stopped (its "
                                                        "finished stages and last checkpoint).")
    json: bool = setting(False, flag="--json", help=_JSON_HELP)


@dataclass
class ModelOutput:
    """What a command that writes one model directory does with one that is there, and how it prints."""

    overwrite: bool = setting(False, flag="--overwrite", help="Replace what is already there (the new one is written "
                                                              "beside it and renamed when complete).")
    json: bool = setting(False, flag="--json", help=_JSON_HELP)


@dataclass
class Inputs:
    """MODEL's source and --data: the groups of a command that loads a model and reads a dataset, as one value
    (:func:`input_groups`)."""

    source: ModelSource
    data: DataSource

    def load(self, model: str, splits: Mapping[str, tuple[str, bool]], *, seed: int = 0,
             num_classes: int | None = None, new_head: bool = False) -> tuple[nn.Module, dict[str, Any]]:
        """MODEL (random weights drawn under ``seed``) and --data's ``splits`` for it (:func:`load_data`)."""
        from vitprune.models import resolve_model

        source, data = self.source, self.data
        net = resolve_model(model, pretrained=source.pretrained, checkpoint=source.checkpoint, seed=seed)
        return net, load_data(net, data.data, splits, data_root=data.data_root, download=data.download,
                              val_split=data.val_split, num_classes=num_classes, new_head=new_head)


#: The options of --data (required) and of MODEL's source, by the parameter each group fills.
_INPUT_GROUPS = {"data": config_options(DataSource, param="data", required=("data",)),
                 "source": config_options(ModelSource, param="source")}


def _grouped(command: F, param: str, build: Callable[..., Any], groups: dict[str, Callable[[F], F]]) -> F:
    """``command`` whose parameter ``param`` is ``build(**parts)``, each part given its options by its group."""
    command = bundle(param, build, groups)(command)
    for group in reversed(groups.values()):
        command = group(command)
    return command


def input_groups(command: F) -> F:
    """``command`` with MODEL's source (:class:`ModelSource`) and --data (:class:`DataSource`, required), given to its
    parameter ``inputs`` as one :class:`Inputs`."""
    return _grouped(command, "inputs", Inputs, _INPUT_GROUPS)


@dataclass
class RunInputs:
    """The shared groups of a command that runs a method on data into a run directory, as one value."""

    source: ModelSource
    data: DataSource
    speed: SpeedConfig
    output: RunOutput


def run_groups(command: F) -> F:
    """``command`` with the groups of a command that runs a method on data into a run directory, given to its
    parameter ``run`` as one :class:`RunInputs`: ``source`` (:class:`ModelSource`), ``data`` (:class:`DataSource`,
    --data required), ``speed`` (:class:`SpeedConfig`) and ``output`` (:class:`RunOutput`)."""
    return _grouped(command, "run", RunInputs, {**_INPUT_GROUPS,
                                                "speed": config_options(SpeedConfig, param="speed", prefix="speed_"),
                                                "output": config_options(RunOutput, param="output")})


PRETRAINED_OPT = option(ModelSource, "pretrained")
CHECKPOINT_OPT = option(ModelSource, "checkpoint")
DEVICE_OPT = option(ModelSource, "device")
#: The seed of a command whose other options have none: every command that builds a random model takes one.
SEED_OPT = typer.Option(0, "--seed", help=SEED_HELP)
#: The options of every command that loads a model's weights.
MODEL_GROUP = ("--pretrained", "--checkpoint", "--device")

SPEED_OPT = option(SpeedConfig, "enabled")
SPEED_BATCH_OPT = option(SpeedConfig, "batch_size")
REPEATS_OPT = option(SpeedConfig, "pairs")
#: The options of every command that times a model.
SPEED_GROUP = ("--speed", "--speed-batch", "--repeats")

DATA_OPT = option(DataSource, "data", required=True)
DATA_ROOT_OPT = option(DataSource, "data_root")
DOWNLOAD_OPT = option(DataSource, "download")
VAL_SPLIT_OPT = option(DataSource, "val_split")
#: The options of every command that reads a dataset (besides --data itself).
DATA_GROUP = ("--data-root", "--download", "--val-split")
NUM_CLASSES_OPT = typer.Option(None, "--num-classes", min=1, help="Replace MODEL's classifier head by a new one, "
                                                                  "starting at zero, for the N classes of --data "
                                                                  "(the saved model records their names).")
#: The option of every command that can train a new head (finetune, and the prune methods and chains that fine-tune).
CLASSES_GROUP = ("--num-classes",)

JSON_OPT = option(RunOutput, "json")
IDENTITY_OPT = typer.Option(AttentionIdentity.norm, "--identity", help=IDENTITY_HELP)
RESUME_OPT = option(RunOutput, "resume")
OVERWRITE_OPT = option(ModelOutput, "overwrite")


def distributed(device: str):
    """The process group this command joins under ``torchrun`` (one process outside it), each process on its
    device: ``cuda:LOCAL_RANK`` where --device allows CUDA. The pipelines shard their statistics over it, train
    data-parallel and write from rank 0 (docs/scaling.md)."""
    from vitprune.training.distributed import init_distributed

    return init_distributed(device)


def load_data(net: nn.Module, data: str, splits: Mapping[str, tuple[str, bool]], *, data_root: Path | None,
              download: bool, val_split: float | None, num_classes: int | None = None,
              new_head: bool = True) -> dict[str, Any]:
    """--data's ``splits`` (name: (split, training transform)) at ``net``'s input size, labelled by the classes
    ``net``'s head was made for (as recorded when --num-classes replaced it), else by the data's own. With
    --num-classes, ``net``'s head is then replaced for the data's classes; without it, a head of another size is
    refused in one line, which offers --num-classes where the command can start from a ``new_head`` and
    ``vitprune finetune`` where it cannot (a new head predicts nothing until trained). Under torchrun rank 0
    downloads alone."""
    from vitprune.adapters import get_adapter
    from vitprune.data import build_dataset, dataset_classes
    from vitprune.surgery import recorded_classes, replace_head
    from vitprune.training.distributed import on_main

    adapter = get_adapter(net)
    options = dict(input_size=adapter.input_size, root=data_root, data_config=adapter.data_config, val_split=val_split,
                   classes=recorded_classes(net) if num_classes is None else None)
    if download:  # the others then read what rank 0 wrote
        on_main(lambda: build_dataset(data, "train", download=True, **options) and None)
    sets = {name: build_dataset(data, split, is_training=training, **options)
            for name, (split, training) in splits.items()}
    classes = dataset_classes(next(iter(sets.values())))
    if num_classes is None and adapter.num_classes != len(classes):
        fix = (f"pass --num-classes {len(classes)} to replace its head by a new one for them" if new_head else
               f"fine-tune a head for them first: vitprune finetune MODEL --data {data} --num-classes {len(classes)}")
        raise VitpruneError(f"the model predicts {adapter.num_classes} classes but {data} has {len(classes)}; {fix}")
    if num_classes is not None:
        if num_classes != len(classes):
            raise VitpruneError(f"--num-classes {num_classes}, but {data} has {len(classes)} classes")
        replace_head(net, num_classes, classes)
    return sets


def load_inputs(model: str, source: ModelSource, data: DataSource, *, seed: int,
                splits: tuple[str, ...] = ("train", "val")) -> tuple[Any, dict[str, Any]]:
    """MODEL (random weights drawn under ``seed``), and --data's ``splits`` for it, of ``train`` (augmented), ``val``
    and ``calibration`` (the training images under the evaluation transform) (:func:`load_data`: a head made for
    other classes is refused, as a new one would decide every pruning choice before it learned anything)."""
    known = {"train": ("train", True), "val": ("val", False), "calibration": ("train", False)}
    return Inputs(source, data).load(model, {name: known[name] for name in splits}, seed=seed)
