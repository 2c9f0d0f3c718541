"""Chains of methods: any sequence of pruning steps, with fine-tuning wherever the chain puts it.

A chain (:class:`~vitprune.runs.steps.ChainConfig`) is a list of steps, each a registered method's step
(:mod:`vitprune.runs.method`) with its settings, and what they share: a seed and a training subset. The methods' own
fine-tuning is off inside a chain: recovery happens where the chain has a ``finetune`` step (with ``"distill"``, from
the chain's starting model), once at the end or between steps; a ``hetdpt`` step with ``"recover": true`` runs
HetDPT's own Stage 2. HetDPT+ is the chain ``hetdpt (recovered) → width → finetune``.

Each step runs on the previous step's saved model and saves its own, so an interrupted chain
resumes at the step it stopped in (which itself resumes from its stage files):

    run_dir/chain.json             the chain as it runs (seed, training subset, preset, each step with its seed): run
                                   again with ``vitprune chain --steps``, it gives the same model; a resumed run may
                                   change only the steps not finished yet
    run_dir/steps/NN-METHOD/       step NN's run: the method's stage files, model/, step.json when done
    run_dir/model/                 the final model: recipe (every step's edits, in order) + weights
    run_dir/report.json            per step MACs, params and top-1; the final model's consistency
                                   check (MACs vs FlopCounterMode, round trip, recipe rebuild, ONNX); speed
"""

from __future__ import annotations

import copy
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from torch import nn

from vitprune.adapters import get_adapter
from vitprune.atomic import read_json, write_json
from vitprune.consistency import check_consistency
from vitprune.data import balanced_subset, build_loader
from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.measure import SpeedConfig, count_macs
from vitprune.measure.target import resolve_shares
from vitprune.recipe import RUN_MODEL_DIR, load
from vitprune.runs.context import MethodData, RunContext, method_run
from vitprune.runs.method import get_method
from vitprune.runs.report import REPORT_FILE, RunReport  # noqa: F401  (REPORT_FILE: the run directory's layout)
from vitprune.runs.stages import START_FILE, Stages, finish_run, prepare_run_dir
from vitprune.runs.steps import DOCUMENT_KEYS, ChainConfig, Step
from vitprune.training import evaluate, seed_all
from vitprune.training.distributed import on_main

CHAIN_FILE, STEPS_DIR, STEP_FILE, MODEL_DIR = "chain.json", "steps", "step.json", RUN_MODEL_DIR

#: Pipelines time their result against their input; inside a chain they do not: the chain's own
#: report times the final model against the starting one.
_NO_SPEED = SpeedConfig(enabled=False)


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


def step_path(run_dir: Path, number: int, method: str) -> Path:
    """Where a chain run in ``run_dir`` keeps its step ``number`` (from 1), a ``method`` step."""
    return run_dir / STEPS_DIR / f"{number:02d}-{method}"


def start_from(run_dir: Path, earlier: Path, steps: int) -> None:
    """Begin the chain run in ``run_dir`` with the first ``steps`` finished steps of the run in ``earlier``, which
    started from the same model under the same seed and training subset, those steps' settings the same: its start
    and chain files and those steps' directories (hard links where the filesystem allows: nothing rewrites a finished
    step's files in place). :func:`run_chain` with ``resume`` then goes on after them (its chain file replaces the
    copied one), and each shared step's record names the run it was computed in (``shared_from``)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in (START_FILE, CHAIN_FILE):
        shutil.copy2(earlier / name, run_dir / name)
    for number, step in enumerate(read_json(earlier / CHAIN_FILE)["steps"][:steps], 1):
        source, target = step_path(earlier, number, step["method"]), step_path(run_dir, number, step["method"])
        shutil.copytree(source, target, copy_function=_link)
        write_json(target / STEP_FILE, {**read_json(source / STEP_FILE), "dir": str(target),
                                        "shared_from": str(source)})


def _link(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


@method_run
def run_chain(model: nn.Module, data: MethodData, config: ChainConfig, ctx: RunContext) -> ChainReport:
    """Run ``config``'s steps in order on a copy of ``model``; returns the report (also in ``ctx.run_dir/report.json``).

    ``model`` is the teacher of distilling fine-tune steps and the reference of the speed comparison. Every step
    trains on ``data.train`` (its class-balanced ``config.train_images``, drawn with ``config.seed``, where the chain
    names them); ``data.calibration`` (default ``data.train``) feeds VBP's and STAR's statistics and HetDPT's transfer
    entropy. A step that cannot apply to what earlier steps left (e.g. width pruning after token pruning) stops the
    chain with one line naming the step.

    Under torchrun (``ctx.dist``) every step runs as its method runs under torchrun (statistics and fine-tunes
    shared out over the processes), every process evaluates, and rank 0 alone writes the run directory,
    checks the final model and times it; the other processes read the steps' saved models from the run
    directory, so on several nodes it must be on a filesystem they share.
    """
    # A share in any step is of the model the chain starts from.
    configs = [resolve_shares(step_config, model) for step_config in config.configs()]
    steps = config.seeded_steps()
    ctx.speed.validate()
    check_family(model, steps, configs)
    run_dir = ctx.run_dir
    started = on_main(lambda: run_dir.is_dir() and any(run_dir.iterdir()))
    prepare_run_dir(run_dir, ctx.resume, start=model)
    try:
        return _run_steps(model, _trained_on(data, config), config, steps, configs, ctx)
    except BaseException:
        if not started:  # a chain stopped before it made anything leaves no directory that refuses the rerun
            on_main(lambda: _discard_unstarted(run_dir))
        raise


def _trained_on(data: MethodData, config: ChainConfig) -> MethodData:
    """``data`` with the training subset ``config`` names (every image where it names none, or more than there are)."""
    train = data.train
    if config.train_images is not None and train is not None and config.train_images < len(train):
        train = balanced_subset(train, config.train_images, seed=config.seed or 0)
    return MethodData(train, data.val, data.calibration)


def _discard_unstarted(run_dir: Path) -> None:
    """Remove ``run_dir`` if it holds nothing but what the run wrote before its first step: no step made any file
    there."""
    plan = {run_dir / CHAIN_FILE, run_dir / START_FILE}
    made = [path for path in run_dir.rglob("*") if path.is_file() and path not in plan]
    if not made:
        shutil.rmtree(run_dir, ignore_errors=True)


def _run_steps(model: nn.Module, data: MethodData, config: ChainConfig, steps: list[Step], configs: list[Any],
               ctx: RunContext) -> ChainReport:
    """:func:`run_chain` once its steps are checked and its run directory is made."""
    run_dir, resume, log = ctx.run_dir, ctx.resume, ctx.log
    document = config.to_dict()
    if resume:
        on_main(lambda: _reconcile(run_dir, document))
    on_main(lambda: write_json(run_dir / CHAIN_FILE, document))
    device = ctx.device_for(model)
    model = model.to(device).eval()
    stages = Stages(log)
    val_loader = build_loader(data.val, 64, shuffle=False, seed=0)
    records = [{"step": 0, "method": "start", **_footprint(model),
                "top1": stages.run("evaluate the starting model", lambda: evaluate(model, val_loader)["top1"])}]
    current = model
    for number, (step, step_config) in enumerate(zip(steps, configs), 1):
        step_dir = step_path(run_dir, number, step.method)
        done = on_main(lambda: read_json(step_dir / STEP_FILE) if resume and (step_dir / STEP_FILE).exists()
                       else None)
        if done is not None:
            log(f"[bold]step {number}: {step.method}[/] (done in an earlier run)")
            current = load(step_dir / MODEL_DIR, map_location=device)
            records.append(done)
            continue
        method = get_method(step.method)
        seed = step.settings.get("seed", config.seed)
        if seed is not None:  # a step is its model, settings and seed, whatever ran before it in this process
            seed_all(seed)
        # The chain owns its steps' directories: a one-model step that saved before its step.json replaces it.
        step_ctx = replace(ctx, run_dir=step_dir / MODEL_DIR if method.out_is_model else step_dir, device=device,
                           overwrite=True, speed=_NO_SPEED, teacher=model, name=None, on_epoch=None)
        try:
            report = stages.run(f"step {number}: {step.method}",
                                lambda: method.run(current, data, step_config, step_ctx))
            # Each step goes on from exactly what was saved.
            current, summary = load(report.saved_model, map_location=device), method.summarize(report, step_config)
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
        copy.deepcopy(current).cpu(), onnx=config.onnx).to_dict()))
    chain = document["steps"]
    return finish_run(ChainReport, current, model, ctx, stages=stages, device=device,
                      top1={"dense": records[0]["top1"], "final": records[-1]["top1"]},
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


def _reconcile(run_dir: Path, document: dict[str, Any]) -> None:
    """Let a resumed run change the steps it has not finished: finished steps, and what the steps share, must be the
    same, and an unfinished step whose settings changed starts afresh (its stage files were decided by the old
    settings)."""
    old = read_json(run_dir / CHAIN_FILE) if (run_dir / CHAIN_FILE).exists() else {}
    old = {"steps": old} if isinstance(old, list) else old  # a chain.json from before it recorded what steps share
    shared = [key for key in DOCUMENT_KEYS if key in old and old[key] != document[key]]
    finished = [number for number, step in enumerate(document["steps"], 1)
                if (step_path(run_dir, number, step["method"]) / STEP_FILE).exists()]
    if shared and finished:
        raise VitpruneError(f"the run in {run_dir} finished steps with another {', '.join(shared)}; resume with the "
                            "same ones, or choose another --out")
    before = old.get("steps", [])
    for number, step in enumerate(document["steps"], 1):
        step_dir = step_path(run_dir, number, step["method"])
        was = before[number - 1] if number <= len(before) else None
        if number in finished and was != step:
            raise VitpruneError(f"step {number} of the run in {run_dir} finished with other settings; resume with "
                                "the same steps up to the last finished one, or choose another --out")
        if was != step:
            shutil.rmtree(step_dir, ignore_errors=True)


def _footprint(model: nn.Module) -> dict[str, int]:
    totals = count_macs(model).totals()
    return {k: totals[k] for k in ("params", "macs_full", "macs_linear")}
