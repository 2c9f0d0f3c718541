"""Chains of methods: any sequence of pruning steps, with fine-tuning wherever the chain puts it.

A chain is a list of steps, each ``{"method": NAME, ...settings}``; the settings are the method's
own (their config's field names; :data:`METHODS` lists them). The methods' own fine-tuning is off inside a
chain: recovery happens where the chain has a ``finetune`` step (with ``"distill"``, from the chain's
starting model), once at the end or between steps; a ``hetdpt`` step with ``"recover": true`` runs HetDPT's
own Stage 2. HetDPT+ is the chain ``hetdpt (recovered) → width → finetune`` (:func:`hetdpt_plus_steps`).

Each step runs on the previous step's saved model and saves its own, so an interrupted chain
resumes at the step it stopped in (which itself resumes from its stage files):

    run_dir/chain.json             the steps (a resumed run may change only those not finished yet)
    run_dir/steps/NN-METHOD/       step NN's run: the method's stage files, model/, step.json when done
    run_dir/model/                 the final model: recipe (every step's edits, in order) + weights
    run_dir/report.json            per step MACs, params and top-1; the final model's consistency
                                   check (MACs vs FlopCounterMode, round trip, recipe rebuild, ONNX); speed
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.utils.data import Dataset

from vitprune.adapters import get_adapter
from vitprune.atomic import read_json, write_json
from vitprune.consistency import check_consistency
from vitprune.data import build_loader
from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.measure import CONVENTIONS, SpeedConfig, count_macs
from vitprune.methods.hetdpt.pipeline import REQUIRES as HETDPT_REQUIRES
from vitprune.methods.hiap.pipeline import REQUIRES as HIAP_REQUIRES
from vitprune.methods.report import REPORT_FILE, Report
from vitprune.methods.stages import START_FILE, Stages, prepare_run_dir, time_against
from vitprune.methods.vbp.pipeline import REQUIRES as VBP_REQUIRES
from vitprune.methods.width.isomorphic import WIDTH_WITHOUT
from vitprune.recipe import RUN_MODEL_DIR, load, save
from vitprune.training import DistillConfig, TrainConfig, evaluate, finetune_pruned
from vitprune.training.distributed import DistContext, on_main
from vitprune.training.config import scaled_lr

CHAIN_FILE, STEPS_DIR, STEP_FILE, MODEL_DIR = "chain.json", "steps", "step.json", RUN_MODEL_DIR

#: Pipelines time their result against their input; inside a chain they do not: the chain's own
#: report times the final model against the starting one.
_NO_SPEED = SpeedConfig(enabled=False)


@dataclass
class Step:
    """One step of a chain: a method and its settings."""

    method: str
    settings: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The chain-file form: ``{"method": ..., **settings}``."""
        return {"method": self.method, **self.settings}


@dataclass
class ChainReport(Report):
    """What :func:`run_chain` did and measured; ``run_dir/report.json`` holds its :meth:`to_dict`."""

    #: Per step (step 0: the starting model) its method, settings, summary, params, MACs and top-1 (``step.json``).
    steps: list[dict[str, Any]]
    #: Validation top-1 of the starting model (``dense``) and of the ``final`` one.
    top1: dict[str, float | None]
    #: Params and MACs in both conventions (:meth:`~vitprune.measure.MacReport.totals`).
    dense: dict[str, int]
    pruned: dict[str, int]
    mac_conventions: dict[str, str]
    #: The final model's check (:class:`~vitprune.consistency.Consistency`'s JSON form).
    consistency: dict[str, Any]
    #: The final model timed against the starting one (``None``: not measured).
    speed: dict[str, Any] | None
    #: Wall time per stage.
    seconds: dict[str, float]
    #: The steps as the chain file gives them.
    chain: list[dict[str, Any]]
    model_dir: str


def parse_chain(document: Any) -> list[Step]:
    """Steps from a chain document: a list of step objects, or ``{"steps": [...]}``. Settings are checked
    against each method before anything runs."""
    items = document.get("steps") if isinstance(document, dict) else document
    if not isinstance(items, list) or not items:
        raise VitpruneError('a chain is a non-empty list of steps such as [{"method": "depth", "attention": [0]}], '
                            'or {"steps": [...]}')
    steps = []
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict) or item.get("method") not in METHODS:
            raise VitpruneError(f"step {number}: each step needs a method, one of: {', '.join(METHODS)}")
        steps.append(Step(item["method"], {k: v for k, v in item.items() if k != "method"}))
    check_chain(steps)
    return steps


def check_chain(steps: list[Step], preset: str = "imagenet") -> list[Any]:
    """Every step's settings read by its method (``preset``: HetDPT's default preset), before anything runs; a
    setting a method rejects is one line naming the step."""
    configs = []
    for number, step in enumerate(steps, 1):
        try:
            configs.append(_METHODS[step.method].configure(step.settings, preset))
        except VitpruneError as exc:
            raise VitpruneError(f"step {number}: {exc}") from None
    return configs


def load_chain(path: str | Path) -> list[Step]:
    """:func:`parse_chain` of a JSON chain file."""
    path = Path(path)
    if not path.is_file():
        raise VitpruneError(f"chain file {path} does not exist")
    try:
        document = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise VitpruneError(f"chain file {path} is not valid JSON: {exc}") from None
    return parse_chain(document)


#: The methods whose settings take a ``seed``: a chain's own seed (:func:`seeded`) is theirs unless they name one.
SEEDED_METHODS = ("hetdpt", "width", "vbp", "star", "hiap", "finetune")


def seeded(steps: list[Step], seed: int) -> list[Step]:
    """``steps`` with ``seed`` as the seed of every step whose method takes one and whose settings name none."""
    return [Step(step.method, {"seed": seed, **step.settings}) if step.method in SEEDED_METHODS else step
            for step in steps]


def hetdpt_plus_steps(*, budget: int, target_macs: float, finetune: dict[str, Any], split: list[int] | str = "auto",
                      preset: str | None = None, convention: str = "full", hetdpt: dict[str, Any] | None = None,
                      width: dict[str, Any] | None = None) -> list[Step]:
    """HetDPT+ as a chain, in the paper's order ("upon completion of the two-stage pipeline, we obtain a
    depth-pruned ViT ... we integrate the depth-pruned model with established width pruning"): HetDPT with its
    own Stage 2 (prune, fine-tune with fc1/fc2 apart distilling from the unpruned model, merge; ``hetdpt``:
    further settings of that step, such as ``epochs``), width pruning of that recovered model to ``target_macs``
    MACs per image (torch-pruning's Isomorphic Pruning, its importance read from the recovered weights, unless
    ``width`` says otherwise), then the width recovery: one fine-tune with ``finetune``'s settings (distilling
    from the unpruned model unless they say otherwise)."""
    hetdpt = {"budget": budget, "split": split, "recover": True, **({"preset": preset} if preset is not None else {}),
              **(hetdpt or {})}
    return [Step("hetdpt", hetdpt),
            Step("width", {"target_macs": target_macs, "convention": convention, **(width or {})}),
            Step("finetune", {"distill": "soft", **finetune})]


@dataclass
class _Context:
    """What every step sees besides its settings."""

    teacher: nn.Module
    train_set: Dataset
    val_set: Dataset
    calibration_set: Dataset | None
    step_dir: Path
    device: torch.device
    progress: bool
    resume: bool
    log: Callable[[str], None]
    dist: DistContext | None

    def pipeline_options(self) -> dict[str, Any]:
        """The arguments every method's pipeline takes alike: its run directory, device, progress, log, resume and
        the torchrun context."""
        return {"run_dir": self.step_dir, "device": self.device, "progress": self.progress, "log": self.log,
                "resume": self.resume, "speed": _NO_SPEED, "dist": self.dist}

    def edit_options(self) -> dict[str, Any]:
        """The arguments depth and width pruning take alike: where to save (the step's ``model/``), device,
        progress and the torchrun context."""
        return {"out": self.step_dir / MODEL_DIR, "device": self.device, "progress": self.progress,
                "speed": _NO_SPEED, "dist": self.dist}


def run_chain(model: nn.Module, train_set: Dataset, val_set: Dataset, steps: list[Step], *, run_dir: str | Path,
              calibration_set: Dataset | None = None, device: torch.device | str | None = None,
              progress: bool = False, log: Callable[[str], None] = lambda _msg: None, resume: bool = False,
              preset: str = "imagenet", speed: SpeedConfig = SpeedConfig(), onnx: bool = True,
              dist: DistContext | None = None) -> ChainReport:
    """Run ``steps`` in order on a copy of ``model``; returns the report (also in ``run_dir/report.json``).

    ``model`` is the teacher of distilling fine-tune steps and the reference of the speed
    comparison. ``calibration_set`` (default ``train_set``) feeds VBP's and STAR's statistics and
    HetDPT's transfer entropy; ``preset`` is HetDPT's default preset. A step that cannot apply to what earlier steps left
    (e.g. width pruning after token pruning) stops the chain with one line naming the step.

    Under torchrun (``dist``) every step runs as its method runs under torchrun (statistics and fine-tunes
    shared out over the processes), every process evaluates, and rank 0 alone writes the run directory,
    checks the final model and times it; the other processes read the steps' saved models from the run
    directory, so on several nodes it must be on a filesystem they share.
    """
    configs = check_chain(steps, preset)
    speed.validate()
    _check_family(model, steps, configs)
    started = on_main(lambda: Path(run_dir).is_dir() and any(Path(run_dir).iterdir()))
    run_dir = prepare_run_dir(run_dir, resume, start=model)
    try:
        return _run_steps(model, train_set, val_set, steps, configs, run_dir=run_dir,
                          calibration_set=calibration_set, device=device, progress=progress, log=log, resume=resume,
                          speed=speed, onnx=onnx, dist=dist)
    except BaseException:
        if not started:  # a chain stopped before it made anything leaves no directory that refuses the rerun
            on_main(lambda: _discard_unstarted(run_dir))
        raise


def _discard_unstarted(run_dir: Path) -> None:
    """Remove ``run_dir`` if it holds nothing but what the run wrote before its first step: no step made any file
    there."""
    plan = {run_dir / CHAIN_FILE, run_dir / START_FILE}
    made = [path for path in run_dir.rglob("*") if path.is_file() and path not in plan]
    if not made:
        shutil.rmtree(run_dir, ignore_errors=True)


def _run_steps(model: nn.Module, train_set: Dataset, val_set: Dataset, steps: list[Step], configs: list[Any], *,
               run_dir: Path, calibration_set: Dataset | None, device: torch.device | str | None, progress: bool,
               log: Callable[[str], None], resume: bool, speed: SpeedConfig, onnx: bool,
               dist: DistContext | None) -> ChainReport:
    """:func:`run_chain` once its steps are checked and its run directory is made."""
    chain = [step.to_dict() for step in steps]
    if resume:
        on_main(lambda: _reconcile(run_dir, chain))
    on_main(lambda: write_json(run_dir / CHAIN_FILE, chain))
    if device is None:
        device = dist.device if dist is not None else next(model.parameters()).device
    device = torch.device(device)
    model = model.to(device).eval()
    stages = Stages(log)
    val_loader = build_loader(val_set, 64, shuffle=False, seed=0)
    records = [{"step": 0, "method": "start", **_footprint(model),
                "top1": stages.run("evaluate the starting model", lambda: evaluate(model, val_loader)["top1"])}]
    current = model
    for number, (step, config) in enumerate(zip(steps, configs), 1):
        step_dir = run_dir / STEPS_DIR / f"{number:02d}-{step.method}"
        done = on_main(lambda: read_json(step_dir / STEP_FILE) if resume and (step_dir / STEP_FILE).exists()
                       else None)
        if done is not None:
            log(f"[bold]step {number}: {step.method}[/] (done in an earlier run)")
            current = load(step_dir / MODEL_DIR, map_location=device)
            records.append(done)
            continue
        ctx = _Context(teacher=model, train_set=train_set, val_set=val_set, calibration_set=calibration_set,
                       step_dir=step_dir, device=device, progress=progress, resume=resume, log=log, dist=dist)
        try:
            current, summary = stages.run(f"step {number}: {step.method}",
                                          lambda: _METHODS[step.method].run(current, config, ctx))
        except VitpruneError as exc:
            raise type(exc)(f"step {number} ({step.method}): {exc}") from None
        except ValueError as exc:  # an edit's precondition, e.g. a block that no longer has what the step cuts
            raise VitpruneError(f"step {number} ({step.method}) cannot apply to the model earlier steps left: "
                                f"{exc}") from None
        current = current.to(device).eval()
        record = {"step": number, "method": step.method, "settings": step.settings, "summary": summary,
                  **_footprint(current), "top1": evaluate(current, val_loader)["top1"], "dir": str(step_dir)}
        on_main(lambda: _finish_step(current, step_dir, record))
        records.append(record)

    on_main(lambda: save(current, run_dir / MODEL_DIR, metadata={"chain": chain}))
    consistency = stages.run("check consistency", lambda: on_main(lambda: check_consistency(
        copy.deepcopy(current).cpu(), onnx=onnx).to_dict()))
    timing = time_against(stages, current, model, speed, device=device, progress=progress)
    report = ChainReport(steps=records, top1={"dense": records[0]["top1"], "final": records[-1]["top1"]},
                         dense=count_macs(model).totals(), pruned=count_macs(current).totals(),
                         mac_conventions=CONVENTIONS, consistency=consistency, speed=timing, seconds=stages.seconds,
                         chain=chain, model_dir=str(run_dir / MODEL_DIR))
    on_main(lambda: write_json(run_dir / REPORT_FILE, report.to_dict()))
    return report


def _finish_step(model: nn.Module, step_dir: Path, record: dict[str, Any]) -> None:
    """Save a step's model unless its method's pipeline saved it (with its metadata), then mark the step done."""
    if not (step_dir / MODEL_DIR).exists():
        save(model, step_dir / MODEL_DIR)
    write_json(step_dir / STEP_FILE, record)


def _check_family(model: nn.Module, steps: list[Step], configs: list[Any]) -> None:
    """Refuse, before any step runs, a step whose method needs what the model's family cannot have done to it."""
    adapter = get_adapter(model)
    for number, (step, config) in enumerate(zip(steps, configs), 1):
        method = _METHODS[step.method]
        try:
            adapter.require(*method.requires(config), by=method.by, without=method.without)
        except UnsupportedArchitectureError as exc:
            raise UnsupportedArchitectureError(f"step {number} ({step.method}): {exc}") from None


def _reconcile(run_dir: Path, chain: list[dict[str, Any]]) -> None:
    """Let a resumed run change the steps it has not finished: finished steps must be the same, and an unfinished
    step whose settings changed starts afresh (its stage files were decided by the old settings)."""
    old = read_json(run_dir / CHAIN_FILE) if (run_dir / CHAIN_FILE).exists() else []
    for number, step in enumerate(chain, 1):
        step_dir = run_dir / STEPS_DIR / f"{number:02d}-{step['method']}"
        was = old[number - 1] if number <= len(old) else None
        if (step_dir / STEP_FILE).exists() and was != step:
            raise VitpruneError(f"step {number} of the run in {run_dir} finished with other settings; resume with "
                                "the same steps up to the last finished one, or choose another --out")
        if was != step:
            shutil.rmtree(step_dir, ignore_errors=True)


def _footprint(model: nn.Module) -> dict[str, int]:
    totals = count_macs(model).totals()
    return {k: totals[k] for k in ("params", "macs_full", "macs_linear")}


def _check_known(settings: dict[str, Any], known: set[str], method: str) -> None:
    unknown = sorted(set(settings) - known)
    if unknown:
        raise VitpruneError(f"{method} step: unknown setting(s) {', '.join(unknown)} "
                            f"(known: {', '.join(sorted(known))})")


def _build(cls: type, settings: dict[str, Any], method: str, *, fixed: dict[str, Any] | None = None,
           defaults: dict[str, Any] | None = None) -> Any:
    """``cls(**settings)`` with ``defaults`` under and ``fixed`` over them; unknown or missing settings are one
    line naming the step's method."""
    fixed = fixed or {}
    _check_known(settings, {f.name for f in fields(cls)} - set(fixed), method)
    given = {**(defaults or {}), **settings, **fixed}
    if cls is TrainConfig and defaults and {"lr", "batch_size"} <= defaults.keys() and "batch_size" in settings \
            and "lr" not in settings:  # a preset's lr is for its batch: it scales with the batch (at_batch)
        given["lr"] = scaled_lr(defaults["lr"], defaults["batch_size"], settings["batch_size"])
    missing = [f.name for f in fields(cls) if f.name not in given and f.default is MISSING
               and f.default_factory is MISSING]
    if missing:
        raise VitpruneError(f"{method} step: missing setting(s) {', '.join(missing)}")
    return cls(**given)


def _split(settings: dict[str, Any], names: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``settings`` divided into those named in ``names`` and the rest."""
    return ({k: v for k, v in settings.items() if k in names}, {k: v for k, v in settings.items() if k not in names})


def _saved(directory: str, ctx: _Context) -> nn.Module:
    """The model a method saved in ``directory`` (so each step starts from exactly what was saved)."""
    return load(directory, map_location=ctx.device)


def _fields(report: Report, names: tuple[str, ...]) -> dict[str, Any]:
    """A step's summary: ``names`` of the report its method returned."""
    return {name: getattr(report, name) for name in names}


def _depth_config(settings: dict[str, Any], preset: str) -> Any:
    from vitprune.methods.depth import DepthConfig

    config = _build(DepthConfig, settings, "depth")
    config.validate()
    return config


def _depth(model: nn.Module, config: Any, ctx: _Context) -> tuple[nn.Module, dict]:
    from vitprune.methods.depth import run_depth

    report = run_depth(model, config, **ctx.edit_options())
    return _saved(report.out, ctx), _fields(report, ("attention", "activation", "identity", "fold_norm",
                                                     "output_gelu"))


def _width_config(settings: dict[str, Any], preset: str) -> Any:
    from vitprune.methods.width import WidthConfig

    config = _build(WidthConfig, settings, "width")
    config.validate()
    return config


def _width(model: nn.Module, config: Any, ctx: _Context) -> tuple[nn.Module, dict]:
    from vitprune.methods.width import run_width

    # Taylor importance ranks on training images under the evaluation transform (the calibration set) when given.
    report = run_width(model, config, train_set=ctx.calibration_set or ctx.train_set, **ctx.edit_options())
    return _saved(report.out, ctx), _fields(report, ("ratio", "plan", "taylor_images"))


def _calibrated(run: Callable[..., Report], model: nn.Module, config: Any, ctx: _Context,
                keys: tuple[str, ...]) -> tuple[nn.Module, dict]:
    """A pipeline that takes calibration images (VBP, STAR) run as a step: its saved model and its report's ``keys``."""
    report = run(model, ctx.train_set, ctx.val_set, config=config,
                 calibration_set=ctx.calibration_set, **ctx.pipeline_options())
    return _saved(report.model_dir, ctx), _fields(report, keys)


def _vbp_config(settings: dict[str, Any], preset: str) -> Any:
    from vitprune.methods.vbp.pipeline import VBPConfig

    config = _build(VBPConfig, settings, "vbp", fixed={"finetune": None})
    config.validate()
    return config


def _vbp(model: nn.Module, config: Any, ctx: _Context) -> tuple[nn.Module, dict]:
    from vitprune.methods.vbp.pipeline import run_vbp

    return _calibrated(run_vbp, model, config, ctx, ("removed", "widths"))


def _star_config(settings: dict[str, Any], preset: str) -> Any:
    from vitprune.methods.star.pipeline import STARConfig

    # rho's default (0.7) gives way to a MAC target or hand-set rates.
    defaults = {"rho": None} if {"target_macs", "rates"} & set(settings) else {}
    config = _build(STARConfig, settings, "star", fixed={"finetune": None}, defaults=defaults)
    config.validate()
    return config


def _star(model: nn.Module, config: Any, ctx: _Context) -> tuple[nn.Module, dict]:
    from vitprune.methods.star.pipeline import run_star

    return _calibrated(run_star, model, config, ctx, ("rho", "keep_rates"))


def _hiap_config(settings: dict[str, Any], preset: str) -> tuple[TrainConfig, Any]:
    from vitprune.methods.hiap import TRAIN_DEFAULTS, HiAPConfig

    train_settings, rest = _split(settings, {f.name for f in fields(TrainConfig)})
    train = _build(TrainConfig, train_settings, "hiap", defaults=TRAIN_DEFAULTS)
    config = _build(HiAPConfig, rest, "hiap")
    train.validate()
    config.validate()
    return train, config


def _hiap(model: nn.Module, configs: tuple[TrainConfig, Any], ctx: _Context) -> tuple[nn.Module, dict]:
    from vitprune.methods.hiap import run_hiap

    train, config = configs
    report = run_hiap(model, ctx.train_set, ctx.val_set, train=train, config=config,
                      **ctx.pipeline_options())
    return _saved(report.model_dir, ctx), _fields(report, ("heads", "neurons", "ffn_closed", "threshold"))


#: A HetDPT step's own settings (not the config's): the layer budget, the split, the preset, a predictor to reuse and
#: whether the step recovers (HetDPT's Stage 2; by default a chain fine-tunes only in its finetune steps).
_HETDPT_OWN = {"budget", "split", "preset", "predictor", "recover"}


def _hetdpt_config(settings: dict[str, Any], preset: str) -> tuple[int, tuple[int, int] | None, Any, str | None]:
    from vitprune.methods.hetdpt.pipeline import STEP_OVERRIDES, HetDPTConfig, StageOverrides, configure, parse_split

    own, changes = _split(settings, _HETDPT_OWN)
    recover = own.get("recover", False)
    if not isinstance(recover, bool):
        raise VitpruneError("hetdpt step: recover (run HetDPT's Stage-2 fine-tune before the merge) must be true or "
                            "false")
    # A step without Stage 2 takes only Steps 1 and 2's stage shortcuts.
    shortcuts = {f.name for f in fields(StageOverrides)} if recover else set(STEP_OVERRIDES)
    _check_known(changes, {*shortcuts, *(f.name for f in fields(HetDPTConfig))} - {"probe", "search", "finetune"},
                 "hetdpt")
    if not isinstance(own.get("budget"), int):
        raise VitpruneError("hetdpt step: budget (layers to remove: attention + activation) must be an integer")
    split = own.get("split", "auto")
    config = configure(own.get("preset", preset), **changes)
    if not recover:
        config.finetune = None
    config.validate()
    return (own["budget"], parse_split(split if isinstance(split, str) else ",".join(map(str, split))), config,
            own.get("predictor"))


def _hetdpt(model: nn.Module, configs: tuple[int, tuple[int, int] | None, Any, str | None],
            ctx: _Context) -> tuple[nn.Module, dict]:
    from vitprune.methods.hetdpt.pipeline import run_hetdpt

    budget, split, config, predictor = configs
    report = run_hetdpt(model, ctx.train_set, ctx.val_set, budget=budget, split=split, predictor=predictor,
                        config=config, calibration_set=ctx.calibration_set, **ctx.pipeline_options())
    recovered = ("top1",) if config.finetune is not None else ()
    return _saved(report.model_dir, ctx), _fields(report, ("attention", "activation", "split", *recovered))


def _finetune_config(settings: dict[str, Any], preset: str) -> tuple[TrainConfig, DistillConfig]:
    own, train_settings = _split(settings, {f.name for f in fields(DistillConfig)})
    train = _build(TrainConfig, train_settings, "finetune")
    distill = _build(DistillConfig, own, "finetune")
    train.validate()
    distill.validate()
    return train, distill


def _finetune(model: nn.Module, configs: tuple[TrainConfig, DistillConfig], ctx: _Context) -> tuple[nn.Module, dict]:
    train, distill = configs
    student = copy.deepcopy(model)
    finetune_pruned(student, ctx.train_set, ctx.val_set, train, teacher=ctx.teacher, distill=distill.distill,
                    alpha=distill.alpha, tau=distill.tau, run_dir=ctx.step_dir / "run", device=ctx.device,
                    progress=ctx.progress, resume=ctx.resume, dist=ctx.dist)
    return student, {**asdict(distill), "epochs": train.epochs}


class _Method(NamedTuple):
    """How a step method reads its settings (checked before a chain runs), what it needs of the model's family (its
    name for the refusal, and the capabilities its settings need) and what it does with them."""

    settings: str
    configure: Callable[[dict[str, Any], str], Any]
    run: Callable[[nn.Module, Any, _Context], tuple[nn.Module, dict[str, Any]]]
    by: str
    requires: Callable[[Any], tuple[str, ...]]
    #: How the method does without a capability, by name (:meth:`~vitprune.adapters.ViTAdapter.require`).
    without: dict[str, str] = {}


_METHODS: dict[str, _Method] = {
    "depth": _Method("DepthConfig's fields: attention, activation (block indices), identity, fold_norm, "
                     "output_gelu", _depth_config, _depth, "depth pruning", lambda config: config.requires),
    "hetdpt": _Method("budget, split ([A, G] or 'auto'), predictor (an earlier run's predictor.json), preset, "
                      "recover (HetDPT's Stage 2; then epochs and lr too), probe_epochs, search_epochs, batch_size "
                      "and HetDPTConfig's other fields",
                      _hetdpt_config, _hetdpt, "HetDPT", lambda _config: HETDPT_REQUIRES),
    "width": _Method("WidthConfig's fields: ratio or target_macs (with convention), importance, heads, head_dims, "
                     "embed, isomorphic, round_to, taylor_batches, taylor_batch_size", _width_config, _width,
                     "width pruning", lambda config: config.requires, WIDTH_WITHOUT),
    "vbp": _Method("VBPConfig's fields: ratio, criterion, compensate, calibration_images, ...", _vbp_config, _vbp,
                   "VBP", lambda _config: VBP_REQUIRES),
    "star": _Method("STARConfig's fields: rho, target_macs or rates, alpha, adaptive, ...", _star_config, _star,
                    "STAR", lambda config: config.requires),
    "hiap": _Method("TrainConfig's fields (epochs required) and HiAPConfig's (target_macs, ...)",
                    _hiap_config, _hiap, "HiAP", lambda _config: HIAP_REQUIRES),
    "finetune": _Method("TrainConfig's fields (epochs required) and DistillConfig's: distill (default none), alpha, "
                        "tau",
                        _finetune_config, _finetune, "fine-tuning", lambda _config: ()),
}
#: Step methods and what their settings are.
METHODS: dict[str, str] = {name: method.settings for name, method in _METHODS.items()}
