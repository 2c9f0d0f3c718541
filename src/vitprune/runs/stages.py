"""What every method's pipeline shares: named stages timed as they run, the run directory,
calibration loaders, and recovery (evaluate right after pruning, fine-tune, evaluate again)."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from torch.utils.data import DataLoader, Dataset

from vitprune.atomic import atomic_file, check_writable, read_json, write_json
from vitprune.data import balanced_subset, build_loader
from vitprune.errors import VitpruneError
from vitprune.measure import CONVENTIONS, SpeedConfig, compare_speed, count_macs
from vitprune.recipe import RUN_MODEL_DIR, save
from vitprune.runs.context import check_target
from vitprune.runs.report import REPORT_FILE, EditReport, RunReport
from vitprune.training import TrainConfig, evaluate, finetune_pruned
from vitprune.training.distributed import DistContext, on_main, shard_dataset
from vitprune.training.engine import logged_epochs

if TYPE_CHECKING:
    from vitprune.runs.context import RunContext

T = TypeVar("T")
E = TypeVar("E", bound=EditReport)
RR = TypeVar("RR", bound=RunReport)


class Stages:
    """Runs named stages, announcing each through ``log`` and adding its wall time to :attr:`seconds`."""

    def __init__(self, log: Callable[[str], None] = lambda _msg: None) -> None:
        self.log = log
        self.seconds: dict[str, float] = {}

    def run(self, name: str, fn: Callable[[], T]) -> T:
        """``fn()``, timed under ``name``."""
        start = time.perf_counter()
        self.log(f"[bold]{name}[/]")
        result = fn()
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        return result


def time_against(stages: Stages, pruned: nn.Module, original: nn.Module, speed: SpeedConfig, *,
                 device: torch.device, progress: bool) -> dict[str, Any] | None:
    """The ``measure speed`` stage: ``pruned`` timed against ``original`` in alternating pairs as ``speed`` says,
    JSON-ready; ``None`` (and no stage) when ``speed`` is off."""
    if not speed.enabled:
        return None
    # Under torchrun rank 0 times alone (the others wait for its figures), so no process competes for the device.
    return stages.run("measure speed", lambda: on_main(lambda: compare_speed(
        pruned, original, batch_size=speed.batch_size, device=device, pairs=speed.pairs, warmup=speed.warmup,
        progress=progress).to_dict()))


def finish_edit(cls: type[E], key: str, edited: nn.Module, original: nn.Module, ctx: RunContext, **fields: Any) -> E:
    """The tail of an edit saved as one model (depth and width pruning, a merge): its report (``cls`` with the
    starting checkpoint's name, where it went, the edit's own ``fields`` and both models counted in the report's
    ``convention``, default full), ``edited`` saved to ``ctx.run_dir`` with that report (but for its speed) under
    ``key`` in the metadata, then timed against ``original`` as ``ctx.speed`` says. Under torchrun rank 0 saves and
    times; every rank gets the figures."""
    convention = fields.get("convention", "full")
    report = cls(model=ctx.name, out=str(ctx.run_dir), **fields,
                 before=count_macs(original, convention=convention).totals(),
                 after=count_macs(edited, convention=convention).totals(), speed=None)
    on_main(lambda: save(edited, report.out,
                         metadata={key: {k: v for k, v in report.to_dict().items() if k != "speed"}}))
    report.speed = time_against(Stages(), edited, original, ctx.speed, device=ctx.device_for(original),
                                progress=ctx.progress)
    return report


def open_model_out(ctx: RunContext) -> None:
    """Start the run of a method whose output is one model (``ctx.run_dir``): a model already there is refused
    unless ``ctx.overwrite`` (checked again here, holding the claim: another process may have written it since the
    command looked)."""
    check_target(ctx.run_dir, ctx.overwrite, "--out")


def finish_run(cls: type[RR], pruned: nn.Module, dense: nn.Module, ctx: RunContext, *, stages: Stages,
               device: torch.device, top1: dict[str, Any], metadata: dict[str, Any],
               footprint: dict[str, Any] | None = None, **fields: Any) -> RR:
    """The tail of every run: save ``pruned`` to ``ctx.run_dir/model`` with ``metadata``, time it against ``dense``
    as ``ctx.speed`` says, count both (``footprint``: the result's own count, else
    :func:`~vitprune.measure.count_macs`'s) and write the report (``cls`` with the method's own ``fields``) to
    ``ctx.run_dir/report.json``. Under torchrun rank 0 saves, times and writes; every rank returns the same report."""
    run_dir = ctx.run_dir
    on_main(lambda: save(pruned, run_dir / RUN_MODEL_DIR, metadata=metadata))
    timing = time_against(stages, pruned, dense, ctx.speed, device=device, progress=ctx.progress)
    report = cls(top1=top1, dense=count_macs(dense).totals(), pruned=footprint or count_macs(pruned).totals(),
                 mac_conventions=CONVENTIONS, speed=timing, seconds=stages.seconds,
                 model_dir=str(run_dir / RUN_MODEL_DIR), **fields)
    on_main(lambda: write_json(run_dir / REPORT_FILE, report.to_dict()))
    return report


#: Where a run directory records the model it started from.
START_FILE = "start.json"


def prepare_run_dir(run_dir: str | Path, resume: bool, start: nn.Module | None = None,
                    seed: int | None = None) -> Path:
    """Create ``run_dir``; without ``resume``, one that holds a previous run is a one-line error. With ``start`` (the
    model the run starts from) and ``seed`` (the run's), a new run records them (its weights' fingerprint), and a
    resumed one must have the same: its finished stages were computed from those weights and drawn under that
    seed. Under torchrun rank 0 checks and creates it (every rank gets its answer: the directory, or the error)."""
    run_dir = Path(run_dir)

    def create() -> None:
        identity = {"weights": None if start is None else weights_fingerprint(start), "seed": seed}
        if not resume and run_dir.exists() and any(run_dir.iterdir()):
            raise VitpruneError(f"{run_dir} is not empty; pass --resume to continue the run there, or choose another "
                                "--out")
        check_writable(run_dir, inside=True)
        recorded = run_dir / START_FILE
        if resume and recorded.is_file():
            started = read_json(recorded)
            if started.get("weights") != identity["weights"]:
                raise VitpruneError(f"cannot resume {run_dir}: it started from other weights (another MODEL, "
                                    "--checkpoint or --seed); resume with those, or choose another --out")
            if started.get("seed") != identity["seed"]:
                raise VitpruneError(f"cannot resume {run_dir}: it ran with --seed {started.get('seed')}, not {seed}")
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        write_json(recorded, identity)

    on_main(create)
    return run_dir


def open_run(model: nn.Module, ctx: RunContext, *, seed: int) -> tuple[Path, torch.device, Stages]:
    """Start the run ``ctx`` describes from ``model``: its run directory (:func:`prepare_run_dir`), its device
    (:meth:`RunContext.device_for`, where ``model`` is moved) and its stages, announced through ``ctx.log``."""
    run_dir = prepare_run_dir(ctx.run_dir, ctx.resume, start=model, seed=seed)
    device = ctx.device_for(model)
    model.to(device)
    return run_dir, device, Stages(ctx.log)


def weights_fingerprint(model: nn.Module) -> str:
    """A SHA-256 of ``model``'s parameters and buffers (names, shapes, dtypes and values)."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        # Flat first: a 0-d tensor (a step count) has no dimension to view as bytes.
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return digest.hexdigest()


def tensor_origin(model: nn.Module, **settings: Any) -> dict[str, str]:
    """What a stage's tensors were computed from, as their safetensors file's metadata: ``model``'s weights
    (:func:`weights_fingerprint`) and the ``settings`` that decide them (images, batch, seed)."""
    return {"weights": weights_fingerprint(model), **{name: json.dumps(value) for name, value in settings.items()}}


def stage_tensors(path: Path, resume: bool, given: str | None, origin: Callable[[], dict[str, str]],
                  compute: Callable[[], dict[str, torch.Tensor]], what: str, option: str) -> dict[str, torch.Tensor]:
    """A stage's tensors, kept in the safetensors file ``path`` with ``origin()`` (:func:`tensor_origin`) as its
    metadata: taken from ``given``, an earlier run's file of them (copied to ``path``; one computed on other weights or
    settings is refused in one line that names ``option``, the setting that gave it), else kept as :func:`cached`
    keeps a value. A run that takes them computes nothing else differently: they are the same tensors."""
    if given is not None:
        on_main(lambda: _take_earlier(Path(given), path, origin(), what, option))

    def read() -> dict[str, torch.Tensor]:
        try:
            return load_file(str(path))
        except (OSError, SafetensorError) as exc:
            raise VitpruneError(f"cannot read {what} from {path}: {exc}; delete it to recompute them") from None

    def write(tensors: dict[str, torch.Tensor]) -> None:
        with atomic_file(path) as tmp:
            save_file({name: t.detach().cpu().contiguous() for name, t in tensors.items()}, str(tmp),
                      metadata=origin())

    return cached(path, resume or given is not None, read, compute, write)


def _take_earlier(given: Path, path: Path, origin: dict[str, str], what: str, option: str) -> None:
    try:
        with safe_open(str(given), "pt") as file:
            found = file.metadata() or {}
    except (OSError, SafetensorError) as exc:
        raise VitpruneError(f"cannot read {what} from {given} ({option}): {exc}") from None
    differ = [name for name in origin if found.get(name) != origin[name]]
    if "weights" not in found:
        raise VitpruneError(f"{given} does not record what its {what} were computed on; leave {option} out to compute "
                            "them for this model")
    if differ:
        settings = ", ".join(f"{name} {found.get(name, '(none)')}, here {origin[name]}" for name in differ
                             if name != "weights")
        on = "other weights" if "weights" in differ else f"other settings ({settings})"
        raise VitpruneError(f"{given} holds {what} computed on {on}; leave {option} out to compute them for this "
                            "model")
    if given.resolve() != path.resolve():
        with atomic_file(path) as tmp:
            shutil.copyfile(given, tmp)


def cached(path: Path, resume: bool, read: Callable[[], T | None], compute: Callable[[], T],
           write: Callable[[T], None]) -> T:
    """A stage's value kept in ``path``: ``read()`` when resuming finds the file, else ``compute()``, then ``write``.

    ``read`` returns ``None`` for a file that no longer fits the run (it is then recomputed and
    overwritten). Under torchrun rank 0 alone looks, reads and writes, and every rank gets what it
    read (:func:`~vitprune.training.distributed.on_main`): all take the same branch, since
    ``compute`` may reduce over every process, and an error there stops every rank.
    """
    found = on_main(lambda: read() if resume and path.exists() else None)
    if found is not None:
        return found
    value = compute()
    on_main(lambda: write(value))
    return value


def available_images(config: T, dataset: Dataset, fields: tuple[str, ...], log: Callable[[str], None]) -> T:
    """``config`` with each image count in ``fields`` cut to the ``dataset``'s size, saying so through ``log``: a
    stage asked for more images than there are uses them all, and the report records what it used."""
    cut = {name: len(dataset) for name in fields
           if getattr(config, name) is not None and getattr(config, name) > len(dataset)}
    for name in cut:
        log(f"  {name.replace('_', ' ')}: the data has {len(dataset)} images, not {getattr(config, name)}; "
            "using them all")
    return replace(config, **cut)


def calibration_loader(dataset: Dataset, images: int | None, batch_size: int, seed: int,
                       dist: DistContext | None = None) -> DataLoader:
    """An unshuffled loader over ``dataset``, or over a class-balanced subset of ``images`` of it.

    With ``dist``, over this process's share of those images (:func:`~vitprune.training.distributed.shard_dataset`):
    the subset is chosen first, so the processes together see what one process would.
    """
    if images is not None and images < len(dataset):
        dataset = balanced_subset(dataset, images, seed=seed)
    return build_loader(shard_dataset(dataset, dist), batch_size, shuffle=False, seed=seed)


def recover(stages: Stages, pruned: nn.Module, teacher: nn.Module, train_set: Dataset, val_loader: DataLoader,
            finetune: TrainConfig | None, *, val_set: Dataset, distill: str, alpha: float, tau: float,
            run_dir: Path, device: torch.device, progress: bool, resume: bool,
            dist: DistContext | None = None) -> dict[str, Any]:
    """Top-1 of ``pruned`` right after pruning and, with ``finetune``, after fine-tuning it in place (and its best
    epoch), distilling from ``teacher`` as ``distill`` says; the run's checkpoints go to ``run_dir``. Under torchrun
    (``dist``) the fine-tune is data-parallel, and every rank evaluates the whole validation split."""
    top1 = {"pruned": stages.run("evaluate right after pruning", lambda: evaluate(pruned, val_loader)["top1"])}
    if finetune is not None:
        stages.run("fine-tune", lambda: finetune_pruned(
            pruned, train_set, val_set, finetune, teacher=teacher, distill=distill, alpha=alpha, tau=tau,
            run_dir=run_dir, device=device, progress=progress, resume=resume, dist=dist))
        top1["finetuned"] = evaluate(pruned, val_loader)["top1"]
        # Every epoch's, those before a resume too (rank 0 alone logs them).
        history = on_main(lambda: logged_epochs(run_dir))
        top1["finetune_best"] = max((h["val_top1"] for h in history), default=None)
    return top1


def retention(top1: dict[str, Any]) -> dict[str, float | None]:
    """Each pruned accuracy as a share of ``top1["dense"]`` (``None`` where it or the dense accuracy is missing, or
    the dense accuracy is 0)."""
    dense = top1["dense"]
    return {k: v / dense if dense and v is not None else None for k, v in top1.items() if k != "dense"}
