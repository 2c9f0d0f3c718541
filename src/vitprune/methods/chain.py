"""Chains of methods: any sequence of pruning steps, with fine-tuning wherever the chain puts it.

A chain is a list of steps, each ``{"method": NAME, ...settings}``: any registered method
(:mod:`vitprune.methods.base`), its settings the method's own (their config's field names; :func:`step_methods`
lists them). The methods' own fine-tuning is off inside a
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from vitprune.adapters import get_adapter
from vitprune.atomic import parse_json, read_json, write_json
from vitprune.consistency import check_consistency
from vitprune.data import build_loader
from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.measure import SpeedConfig, count_macs
from vitprune.methods.base import MethodData, RunContext, get_method, methods
from vitprune.methods.report import REPORT_FILE, RunReport  # noqa: F401  (REPORT_FILE: the run directory's layout)
from vitprune.methods.stages import START_FILE, Stages, finish_run, prepare_run_dir
from vitprune.recipe import RUN_MODEL_DIR, load
from vitprune.training import evaluate
from vitprune.training.distributed import DistContext, on_main

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
class ChainReport(RunReport):
    """What :func:`run_chain` did and measured; ``run_dir/report.json`` holds its :meth:`to_dict`."""

    #: Per step (step 0: the starting model) its method, settings, summary, params, MACs and top-1 (``step.json``);
    #: ``top1`` holds the starting model's (``dense``) and the ``final`` one's.
    steps: list[dict[str, Any]]
    #: The final model's check (:class:`~vitprune.consistency.Consistency`'s JSON form).
    consistency: dict[str, Any]
    #: The steps as the chain file gives them.
    chain: list[dict[str, Any]]


def parse_chain(document: Any) -> list[Step]:
    """Steps from a chain document: a list of step objects, or ``{"steps": [...]}``. Settings are checked
    against each method before anything runs."""
    items = document.get("steps") if isinstance(document, dict) else document
    if not isinstance(items, list) or not items:
        raise VitpruneError('a chain is a non-empty list of steps such as [{"method": "depth", "attention": [0]}], '
                            'or {"steps": [...]}')
    steps = []
    known = methods()
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict) or item.get("method") not in known:
            raise VitpruneError(f"step {number}: each step needs a method, one of: {', '.join(known)}")
        steps.append(Step(item["method"], {k: v for k, v in item.items() if k != "method"}))
    check_chain(steps)
    return steps


def check_chain(steps: list[Step], preset: str = "imagenet") -> list[Any]:
    """Every step's settings read by its method (``preset``: HetDPT's default preset), before anything runs; a
    setting a method rejects is one line naming the step."""
    configs = []
    for number, step in enumerate(steps, 1):
        try:
            configs.append(get_method(step.method).configure(step.settings, preset))
        except VitpruneError as exc:
            raise VitpruneError(f"step {number}: {exc}") from None
    return configs


def load_chain(path: str | Path) -> list[Step]:
    """:func:`parse_chain` of a JSON chain file."""
    path = Path(path)
    if not path.is_file():
        raise VitpruneError(f"chain file {path} does not exist")
    return parse_chain(parse_json(path, "chain file"))


def seeded(steps: list[Step], seed: int) -> list[Step]:
    """``steps`` with ``seed`` as the seed of every step whose method takes one (:attr:`Method.seeded
    <vitprune.methods.base.Method.seeded>`) and whose settings name none."""
    known = methods()
    return [Step(step.method, {"seed": seed, **step.settings})
            if step.method in known and known[step.method].seeded else step for step in steps]


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
    check_family(model, steps, configs)
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
    data = MethodData(train_set, val_set, calibration_set)
    for number, (step, config) in enumerate(zip(steps, configs), 1):
        step_dir = run_dir / STEPS_DIR / f"{number:02d}-{step.method}"
        done = on_main(lambda: read_json(step_dir / STEP_FILE) if resume and (step_dir / STEP_FILE).exists()
                       else None)
        if done is not None:
            log(f"[bold]step {number}: {step.method}[/] (done in an earlier run)")
            current = load(step_dir / MODEL_DIR, map_location=device)
            records.append(done)
            continue
        method = get_method(step.method)
        ctx = RunContext(run_dir=step_dir / MODEL_DIR if method.out_is_model else step_dir, device=device,
                         progress=progress, resume=resume, log=log, speed=_NO_SPEED, dist=dist, teacher=model)
        try:
            report = stages.run(f"step {number}: {step.method}", lambda: method.run(current, data, config, ctx))
            # Each step goes on from exactly what was saved.
            current, summary = load(report.saved_model, map_location=device), method.summarize(report, config)
        except VitpruneError as exc:
            raise type(exc)(f"step {number} ({step.method}): {exc}") from None
        except ValueError as exc:  # an edit's precondition, e.g. a block that no longer has what the step cuts
            raise VitpruneError(f"step {number} ({step.method}) cannot apply to the model earlier steps left: "
                                f"{exc}") from None
        current = current.to(device).eval()
        record = {"step": number, "method": step.method, "settings": step.settings, "summary": summary,
                  **_footprint(current), "top1": evaluate(current, val_loader)["top1"], "dir": str(step_dir)}
        on_main(lambda: _finish_step(step_dir, record))
        records.append(record)

    consistency = stages.run("check consistency", lambda: on_main(lambda: check_consistency(
        copy.deepcopy(current).cpu(), onnx=onnx).to_dict()))
    return finish_run(ChainReport, current, model, run_dir=run_dir, stages=stages, speed=speed, device=device,
                      progress=progress, top1={"dense": records[0]["top1"], "final": records[-1]["top1"]},
                      metadata={"chain": chain}, steps=records, consistency=consistency, chain=chain)


def _finish_step(step_dir: Path, record: dict[str, Any]) -> None:
    """Mark a step done (its method saved its model)."""
    write_json(step_dir / STEP_FILE, record)


def check_family(model: nn.Module, steps: list[Step], configs: list[Any]) -> None:
    """Refuse (:class:`~vitprune.errors.UnsupportedArchitectureError`), before any step runs, a step whose method
    needs what the model's family cannot have done to it."""
    adapter = get_adapter(model)
    for number, (step, config) in enumerate(zip(steps, configs), 1):
        method = get_method(step.method)
        try:
            adapter.require(*method.requires(config), by=method.title, without=method.without)
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


def step_methods() -> dict[str, str]:
    """The methods a step can name, each with what its settings are."""
    return {name: method.settings_help() for name, method in methods().items()}
