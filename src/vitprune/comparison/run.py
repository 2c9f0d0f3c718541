"""``vitprune compare`` as a function: every applicable method brought to the same MAC target, recovered the same
way, scored on the same images and timed the same way, next to the dense model given the same recovery.

    run_dir/start.json                      the model the comparison started from (a resume must start from it)
    run_dir/compare.json                    the targets and the budget (a resume must keep them)
    run_dir/arms/dense/                     the control: the dense model through the recovery alone
    run_dir/arms/macs-0.6/ARM/              one arm's chain run (chain.json, steps/, model/, report.json) and
                                            arm.json, its scores, when it finished
    run_dir/report.json, report.md,         the answer: table, paired statistics, the best arm per target and
    run_dir/pareto.png                      the command that reproduces it alone; accuracy against measured speedup

An arm that finished is read back on ``resume``; one that stopped goes on from its chain's last finished step.
"""

from __future__ import annotations

import copy
import functools
import math
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from vitprune.atomic import read_json, write_json
from vitprune.comparison.arms import PLANNED, UNREACHABLE, Arm, arm_names, check_arms, left_out, plan_arm
from vitprune.comparison.budget import CompareBudget
from vitprune.comparison.config import CompareConfig, check_targets
from vitprune.comparison.page import duration, write_page
from vitprune.comparison.pick import choose
from vitprune.comparison.report import DONE, FAILED, ArmResult, CompareReport, Target
from vitprune.comparison.timing import check_timing, time_deployed
from vitprune.consistency import check_consistency
from vitprune.data import build_loader
from vitprune.errors import UnreachableTargetError, VitpruneError
from vitprune.export import export_onnx
from vitprune.measure import SpeedConfig, count_macs
from vitprune.measure.paired import pack_correct, top1_interval, unpack_correct
from vitprune.measure.target import ON_TARGET, MacTarget, goal
from vitprune.recipe import RUN_MODEL_DIR, load
from vitprune.runs.chain import CHAIN_FILE, run_chain, start_from, step_path
from vitprune.runs.context import MethodData, RunContext, method_run
from vitprune.runs.method import TargetSearch, get_method
from vitprune.runs.stages import prepare_run_dir
from vitprune.runs.steps import parse_chain
from vitprune.training import evaluate
from vitprune.training.distributed import on_main
from vitprune.training.engine import class_logits

PLAN_FILE, ARMS_DIR, ARM_FILE, CONTROL = "compare.json", "arms", "arm.json", "dense"
#: An arm's MACs count as on target within this share of it.
MATCH = ON_TARGET


@method_run
def compare(model: nn.Module, data: MethodData, config: CompareConfig, ctx: RunContext) -> CompareReport:
    """Run every arm at each target and the dense control; returns the report (also written to ``ctx.run_dir``:
    report.json, report.md, pareto.png).

    ``config.target_macs`` are MAC targets in the full convention (a share of ``model``'s MACs or a count per image;
    run largest first); ``config.speedup`` speedups over ``model`` measured here as ``ctx.speed`` says, which each arm
    reaches by probing MAC shares (:data:`PROBES` at most) until the target lies within the measured speedup's
    quartiles. Every arm (:func:`~vitprune.comparison.arms.arm_names`, or ``config.arms``) is a chain run with the
    comparison's seed and training subset, so the chain file it leaves reproduces it with ``vitprune chain``.
    ``data.calibration`` (default ``data.train``) is the training images under the evaluation transform, for the
    statistics and rankings. Under torchrun (``ctx.dist``) every arm runs as its chain does.
    """
    targets = check_targets(config.target_macs, config.speedup, ctx.speed)
    budget = config.resolved_budget()
    check_arms(config.arms)
    device = ctx.device_for(model)
    check_timing(config.runtime, config.dtype, device)
    model = model.to(device).eval()
    dense_count = count_macs(model).totals()
    dense_macs = dense_count["macs_full"]
    for target in targets:  # a target at or above the dense model's MACs is one line, before anything runs
        if target.kind == "macs":
            goal(target.value, model, dense_macs)
    targets = sorted(targets, key=lambda t: (t.kind != "macs", -t.value.of(dense_macs) if t.kind == "macs"
                                             else t.value))
    run_dir = prepare_run_dir(ctx.run_dir, ctx.resume, start=model, seed=config.seed)
    seeds = config.seed_list()
    plan = {"targets": [t.label for t in targets], "budget": _budget_dict(budget), "seed": config.seed, "seeds": seeds,
            "arms": config.arms, "timing": {"batches": config.batches(ctx.speed), "runtimes": config.runtime,
                                            "dtype": config.dtype, "pairs": ctx.speed.pairs,
                                            "timed": ctx.speed.enabled}}
    on_main(lambda: _check_plan(run_dir / PLAN_FILE, plan, ctx.resume))
    start = time.perf_counter()

    images = len(data.train) if budget.train_images is None else min(budget.train_images, len(data.train))
    names = [n for n in arm_names() if config.arms is None or n in config.arms]
    runs = len(seeds) * (1 + len(names) * len(targets))
    # Every arm planned under the first seed (a speedup target's at 1 / factor): what the estimate counts, and a MAC
    # target's first run.
    plans = {(t.label, name): plan_arm(model, name, t.value if t.kind == "macs" else MacTarget.relative(1 / t.value),
                                       budget, seeds[0], dense_macs=dense_macs) for t in targets for name in names}
    planned = list(plans.values())
    estimate = _estimate(model, images, len(data.val), budget, len(seeds), planned, device,
                         config if ctx.speed.enabled else None, ctx.speed)
    ctx.log(f"up to {runs} runs ({len(seeds)} seed(s) x ({len(targets)} target(s) x {len(names)} arms, and the dense "
            f"control)) on {images} training images; estimated {duration(estimate)} for the methods' searches, the "
            "recoveries, the evaluations and the timings (a speedup target's probes add to it)")

    loader = build_loader(data.val, 64, shuffle=False, seed=0)
    dense_correct = evaluate(model, loader, per_image=True)["correct"].numpy()
    runner = _Runner(model, data, replace(ctx, device=device), loader=loader, budget=budget, seeds=seeds,
                     dense_macs=dense_macs, total=runs, plans=plans, timing={"batches": config.batches(ctx.speed),
                                                                "runtimes": config.runtime, "dtype": config.dtype})
    control = runner.control(run_dir / ARMS_DIR / CONTROL)
    results = [runner.arm(name, t, run_dir / ARMS_DIR / t.label / name) for t in targets for name in names]

    interval = top1_interval(dense_correct)
    report = CompareReport(
        model=config.model, data=config.data, budget=plan["budget"], targets=plan["targets"],
        dense={"top1": 100 * float(dense_correct.mean()), "interval": list(interval), "params": dense_count["params"],
               "macs": dense_macs},
        control=control, arms=results, left_out=left_out(),
        pick={t.label: _pick(results, control, t.label, config, run_dir, runner.scores) for t in targets},
        estimate_seconds=estimate, seconds=_seconds(control, results, time.perf_counter() - start),
        validation_images=len(dense_correct), run_dir=str(run_dir), seeds=seeds,
        speed={**asdict(ctx.speed), "device": str(device), "dtype": config.dtype, "threads": torch.get_num_threads(),
               "batches": config.batches(ctx.speed), "runtimes": config.runtime})
    on_main(lambda: _write(report, run_dir))
    return report


def _budget_dict(budget: CompareBudget) -> dict[str, Any]:
    return {"name": budget.name, "recovery": asdict(budget.recovery), "distill": asdict(budget.distill),
            "train_images": budget.train_images, "effort": budget.effort}


def _check_plan(path: Path, plan: dict[str, Any], resume: bool) -> None:
    """Record the plan; a resumed comparison must keep its targets and budget (its finished arms were run so)."""
    if resume and path.is_file() and read_json(path) != plan:
        raise VitpruneError(f"the comparison in {path.parent} ran with other targets, budget, arms, seeds or timing; "
                            "resume with the same ones, or choose another --out")
    write_json(path, plan)


def _estimate(model: nn.Module, images: int, val_images: int, budget: CompareBudget, seeds: int, planned: list[Arm],
              device: torch.device, config: CompareConfig | None, speed: SpeedConfig) -> float:
    """Seconds the comparison is expected to take under ``seeds`` seeds, from a training step and a forward pass of
    ``model`` timed here: each planned arm's searches (:meth:`~vitprune.runs.method.TargetSearch.search_cost`: images
    through training steps and forward passes) and every recovery (each arm's and the control's, each image also
    through the teacher); per run, its evaluations (:func:`_evaluation_images`), its timing as deployed (``config``;
    ``None``: not timed) and what every chain does besides (a saved and reloaded model per step and the final
    model's consistency check, timed here on the dense model). What runs share is counted once, as the runner shares
    it: the first steps an earlier run ran, and what a method reuses from an earlier step (HetDPT's Step 1)."""
    seconds = functools.cache(lambda batch, train: _image_seconds(model, batch, device, train=train))
    batch = min(budget.recovery.batch_size, images)
    recoveries = 1 + sum(arm.status == PLANNED for arm in planned)
    train = forward = recoveries * budget.recovery.epochs * images
    by_method = _planned_steps(planned)
    chains: list[tuple[list[dict[str, Any]], Path]] = []
    for number, arm in enumerate(a for a in planned if a.status == PLANNED):
        steps = _settled(arm.steps, by_method, chains)
        shared = _shared_start(steps, chains)
        for index, step in enumerate(steps):
            method = get_method(step["method"])
            if isinstance(method, TargetSearch) and (shared is None or index >= shared[1]):
                searched, passed = method.search_cost(model, step, images, val_images)
                train, forward = train + searched, forward + passed
        chains.append((steps, Path(f"run-{number}")))  # where the run would be: reuse names files there
    total = train * seconds(batch, True) + forward * seconds(batch, False)
    steps = max((len(arm.steps) for arm in planned if arm.steps), default=1)
    per_run = (_evaluation_images(steps, val_images) * seconds(min(64, val_images), False)
               + (steps + 1) * _chain_seconds(model))
    if config is not None:
        per_run += _timing_seconds(model, config, speed, lambda batch: seconds(batch, False))
    return seeds * (total + (1 + len(planned)) * per_run)


def _evaluation_images(steps: int, val_images: int) -> int:
    """Images one run puts through an evaluation: a chain evaluates the validation images before and after each of its
    ``steps``, the comparison once more."""
    return (2 * steps + 1) * val_images


def _chain_seconds(model: nn.Module) -> float:
    """Seconds of what a chain does to a model besides training and evaluating it, timed on ``model``: the consistency
    check of its final model (a save and a reload, the MAC counter against FlopCounterMode, the recipe rebuilt),
    which also stands for each step's save and reload."""
    begin = time.perf_counter()
    check_consistency(copy.deepcopy(model).cpu(), onnx=False)
    return time.perf_counter() - begin


def _timing_seconds(model: nn.Module, config: CompareConfig, speed: SpeedConfig, forward: Any) -> float:
    """Seconds one run's timing as deployed takes: both models through each batch's warm-up and pairs, in each
    runtime, at the dense model's forward speed (``forward(batch)``: seconds per image), and an ONNX export of both
    where onnxruntime times them (the dense model's, timed here)."""
    per_runtime = sum(2 * (speed.warmup + speed.pairs) * batch * forward(batch) for batch in config.batches(speed))
    seconds = len(config.runtime) * per_runtime
    if "onnxruntime" in config.runtime:
        with tempfile.TemporaryDirectory() as tmp:
            begin = time.perf_counter()
            export_onnx(model, Path(tmp) / "dense.onnx")
            seconds += 2 * (time.perf_counter() - begin)
    return seconds


def _image_seconds(model: nn.Module, batch: int, device: torch.device, *, train: bool = True) -> float:
    """Seconds per image of a training step (forward, backward, AdamW; ``train``) or of a forward pass at
    ``batch``, the median of three after one untimed."""
    from vitprune.adapters import get_adapter

    adapter = get_adapter(model)
    work = copy.deepcopy(model).to(device).train(train)
    optimizer = torch.optim.AdamW(work.parameters(), lr=1e-6) if train else None
    # Drawn from a generator of its own: the arms that follow start from the random state the comparison had.
    generator = torch.Generator(device).manual_seed(0)
    images = torch.randn(batch, *adapter.input_size, device=device, generator=generator)
    labels = torch.randint(0, adapter.num_classes, (batch,), device=device, generator=generator)

    def step() -> None:
        if not train:
            with torch.no_grad():
                work(images)
            return
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(class_logits(work(images)), labels).backward()
        optimizer.step()

    times = []
    for _ in range(4):
        begin = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - begin)
    return float(np.median(times[1:])) / batch


def _planned_steps(planned: list[Arm]) -> dict[str, list[dict[str, Any]]]:
    """The planned arms' steps, by method."""
    steps: dict[str, list[dict[str, Any]]] = {}
    for arm in planned:
        for step in arm.steps or ():
            steps.setdefault(step["method"], []).append(step)
    return steps


def _settled(steps: list[dict[str, Any]], planned: dict[str, list[dict[str, Any]]],
             chains: list[tuple[list[dict[str, Any]], Path]]) -> list[dict[str, Any]]:
    """``steps`` with the settings that let one search serve their method's ``planned`` steps
    (:meth:`~vitprune.runs.method.TargetSearch.shared_search`) and what the first fitting step of the method in
    ``chains`` (earlier runs' steps and directories, one seed) leaves them
    (:meth:`~vitprune.runs.method.TargetSearch.reuse`): a step after the same steps, so on the same model (HetDPT's
    Step 1, STAR's LRP prior and VBP's statistics of the dense model, once per seed)."""
    settled: list[dict[str, Any]] = []
    for step in steps:
        method = get_method(step["method"])
        if isinstance(method, TargetSearch):
            step = {**step, **method.shared_search(step, planned.get(step["method"], []))}
            earlier_steps = ((earlier, step_path(run_dir, number, earlier["method"]))
                             for ran, run_dir in chains for number, earlier in enumerate(ran, 1)
                             if earlier["method"] == step["method"] and ran[:number - 1] == settled)
            found = next((given for earlier, step_dir in earlier_steps
                          if (given := method.reuse(step, earlier, step_dir))), {})
            step = {**found, **step}
        settled.append(step)
    return settled


def _shared_start(steps: list[dict[str, Any]], chains: list[tuple[list[dict[str, Any]], Path]]
                  ) -> tuple[Path, int] | None:
    """Of ``chains`` (earlier runs' steps and directories, one seed), the one that began with the most of ``steps``
    (the same settings, so the same models: the HetDPT step that HetDPT+ and HetDPT then STAR begin with, a speedup
    target's last probe) and how many; ``None``: none began with the first."""
    best = None
    for earlier, run_dir in chains:
        count = next((n for n, (mine, theirs) in enumerate(zip(steps, earlier)) if mine != theirs),
                     min(len(steps), len(earlier)))
        if count and (best is None or count > best[1]):
            best = (run_dir, count)
    return best


#: A speedup target's probes per arm, at most.
PROBES = 6
#: MAC shares a speedup target's probes keep within.
SHARES = (0.02, 0.98)


class _Runner:
    """Runs the arms of one comparison under each seed (or reads back those a resumed one finished) and keeps their
    scores."""

    def __init__(self, model: nn.Module, data: MethodData, ctx: RunContext, *, loader: Any, budget: CompareBudget,
                 seeds: list[int], dense_macs: int, total: int, plans: dict[tuple[str, str], Arm],
                 timing: dict[str, Any]):
        """``ctx``: the comparison's; each arm's chain runs in it with the arm's directory. ``plans``: each arm
        planned under the first seed, by target label and arm name (a MAC target's first run). ``timing``:
        :func:`~vitprune.comparison.timing.time_deployed`'s batches, runtimes and dtype (the first runtime at
        ``ctx.speed``'s batch is the pick's)."""
        self.model, self.data, self.ctx, self.loader, self.log = model, data, ctx, loader, ctx.log
        self.budget, self.seeds, self.dense_macs, self.total = budget, seeds, dense_macs, total
        self.plans, self.timing = plans, timing
        #: The planned steps by method: what one search of each may serve.
        self.planned = _planned_steps(list(plans.values()))
        #: Each scored run's per-image correctness by run directory (rank 0 alone writes it to the run's file), and
        #: each scored arm's, ``[seeds, images]``, by the arm's directory.
        self.scores: dict[str, np.ndarray] = {}
        self.number = 0
        #: Seconds of each run this call ran (not those read back), for the time left.
        self.ran: list[float] = []
        #: Every finished chain run's steps and directory, by seed: what later steps may reuse, and the steps a later
        #: run begins with, where the same.
        self.chains: dict[int, list[tuple[list[dict[str, Any]], Path]]] = {}

    def control(self, control_dir: Path) -> ArmResult:
        """The dense model through the recovery alone, under each seed."""
        runs = []
        for seed in self.seeds:
            arm = Arm(CONTROL, "dense + the same recovery", PLANNED,
                      steps=[{"method": "finetune", **self.budget.recovery_settings(seed)}])
            runs.append(self.run(arm, None, None, control_dir / f"seed-{seed}", seed))
        return self._combine(runs, control_dir)

    def arm(self, name: str, target: Target, arm_dir: Path) -> ArmResult:
        """Arm ``name`` at ``target`` under each seed: planned at the MAC share (a speedup target's found by probing
        under the first seed), then run."""
        stored = {seed: self._stored(arm_dir / f"seed-{seed}") for seed in self.seeds}
        known = next((result for result in stored.values() if result is not None), None)
        begin = time.perf_counter()
        probes: list[dict[str, Any]] | None = None
        first: Arm | None = None
        if target.kind == "macs":
            share = target.value.of(self.dense_macs) / self.dense_macs
            first = self.plans[(target.label, name)]
        elif known is not None:  # a resumed arm keeps the share its probes found
            share, probes = known.share, known.probes
        else:
            first, share, probes = self._probe(name, target.value, arm_dir.parent / "probes" / name, self.seeds[0])
        spent = time.perf_counter() - begin
        goal = target.value if target.kind == "macs" else MacTarget.relative(share)
        runs = []
        for seed in self.seeds:
            if stored[seed] is not None:
                runs.append(stored[seed])
                continue
            planned = first if first is not None and seed == self.seeds[0] else plan_arm(
                self.model, name, goal, self.budget, seed, dense_macs=self.dense_macs)
            if planned.status != PLANNED:  # the method's reason at this target: the other seeds would give it too
                self.number += len(self.seeds)
                result = ArmResult(name, planned.title, target.label, planned.status, reason=planned.reason,
                                   share=share, probes=probes, run_dir=str(arm_dir), seeds=self.seeds)
                on_main(lambda: write_json(arm_dir / ARM_FILE, {"result": result.to_dict()}))
                self.log(f"{self.number}/{self.total} {name} ({target.describe()}): {planned.status}: "
                         f"{planned.reason}")
                return result
            runs.append(self.run(planned, target, share, arm_dir / f"seed-{seed}", seed, probes=probes,
                                 spent=spent if seed == self.seeds[0] else 0.0))
        return self._combine(runs, arm_dir)

    def _stored(self, run_dir: Path) -> ArmResult | None:
        """The run a resumed comparison finished (not one that stopped on an error: that one runs again, from its
        chain's last finished step)."""
        if not self.ctx.resume or not (run_dir / ARM_FILE).is_file():
            return None
        stored = read_json(run_dir / ARM_FILE)
        result = ArmResult(**stored["result"])
        if result.status == FAILED:
            return None
        self.number += 1
        self.log(f"[bold]{self.number}/{self.total} {result.arm}[/] ({result.target or 'control'}, seed "
                 f"{result.seed}): finished in an earlier run")
        if result.status == DONE:
            self.scores[result.run_dir] = unpack_correct(stored["correct"], len(self.loader.dataset))
            self._remember(result.steps, run_dir, result.seed)
        return result

    def _reuse(self, steps: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
        """``steps`` settled (:func:`_settled`) against the finished steps of the same seed: HetDPT's Step 1 once per
        seed, its sweeps reaching every planned budget; the chain file says so, so it reproduces the run."""
        return _settled(steps, self.planned, self.chains.get(seed, []))

    def _remember(self, steps: list[dict[str, Any]], run_dir: Path, seed: int) -> None:
        """The finished steps of the chain run in ``run_dir``, for later steps and runs to reuse."""
        self.chains.setdefault(seed, []).append((steps, run_dir))

    def _combine(self, runs: list[ArmResult], arm_dir: Path) -> ArmResult:
        """One arm's runs under the seeds as one row: top-1 the mean over seeds with its two-way interval, MACs and
        params the largest, on target only if every seed is, the speedups' medians over seeds, the wall times'
        sum; a run that did not finish makes the arm's status and reason (naming its seed)."""
        seeds = [run.seed for run in runs]
        base = replace(runs[0], run_dir=str(arm_dir), seed=None, seeds=seeds, runs=[run.to_dict() for run in runs],
                       seconds=sum(run.seconds or 0.0 for run in runs))
        unfinished = next((run for run in runs if run.status != DONE), None)
        if unfinished is not None:
            reason = unfinished.reason if len(runs) == 1 else f"seed {unfinished.seed}: {unfinished.reason}"
            return replace(base, status=unfinished.status, reason=reason,
                           top1=None, interval=None, macs=None, macs_share=None, params=None, met=None, speedup=None,
                           speedup_q1=None, speedup_q3=None, timings=None, memory=None)
        correct = np.stack([self.scores[run.run_dir] for run in runs])
        self.scores[str(arm_dir)] = correct
        worst = max(runs, key=lambda run: run.macs)
        met = None if runs[0].met is None else all(run.met for run in runs)
        return replace(base, top1=100 * float(correct.mean()), interval=list(top1_interval(correct)),
                       params=max(run.params for run in runs), macs=worst.macs, macs_share=worst.macs_share, met=met,
                       reason=next((run.reason for run in runs if run.reason), None),
                       **_median_speed(runs))

    def _probe(self, name: str, factor: float, probes_dir: Path, seed: int) -> tuple[Arm, float, list[dict[str, Any]]]:
        """The MAC share at which arm ``name``'s pruned (not yet recovered) model runs ``factor`` times faster than
        the dense one: from ``1 / factor``, each next share from the speedups measured so far (a power law through
        the last two), until the factor lies within a probe's quartiles (or the next share is the same) or
        :data:`PROBES` have run, then the share they point to; every probe is planned under ``seed``. Returns the
        arm planned at that share (or why it cannot be), the share and the probes."""
        share, probes = min(max(1 / factor, SHARES[0]), SHARES[1]), []
        for number in range(1, PROBES + 1):
            planned = plan_arm(self.model, name, MacTarget.relative(share), self.budget, seed,
                               dense_macs=self.dense_macs)
            if planned.status != PLANNED:
                return replace(planned, reason=planned.reason + _fastest(probes)), share, probes
            # The pruning alone: speed does not depend on the recovery (HiAP's training is its pruning).
            steps = planned.steps[:-1] if len(planned.steps) > 1 and planned.steps[-1]["method"] == "finetune" \
                else planned.steps
            steps = self._reuse(steps, seed)
            self.log(f"  {name}: probe {number} at {share:.1%} of the MACs")
            try:
                chain = self._chain(steps, probes_dir / f"{number:02d}", seed)
                self._remember(steps, probes_dir / f"{number:02d}", seed)
            except UnreachableTargetError as exc:
                return Arm(name, planned.title, UNREACHABLE, reason=str(exc)), share, probes
            _, timing = self._time(load(probes_dir / f"{number:02d}" / RUN_MODEL_DIR,
                                        map_location=self.ctx.device).eval(), primary_only=True)
            if timing is None or "error" in timing:
                why = "not timed" if timing is None else timing["error"]
                return Arm(name, planned.title, FAILED, reason=f"probe {number}: {why}"), share, probes
            probes.append({"share": share, "macs_share": chain.pruned["macs_full"] / self.dense_macs,
                           "speedup": timing["speedup"], "speedup_q1": timing["speedup_q1"],
                           "speedup_q3": timing["speedup_q3"]})
            if timing["speedup_q3"] < factor and share <= SHARES[0]:
                return Arm(name, planned.title, UNREACHABLE, reason=f"{name} at {share:.1%} of the MACs, the least a "
                           f"speedup target's probes try, runs slower than {factor:g}×{_fastest(probes)}"), \
                    share, probes
            following = _next_share(probes, factor)
            if timing["speedup_q1"] <= factor <= timing["speedup_q3"] or abs(following - share) < 1e-3:
                return planned, share, probes
            share = following
        # The probes ran out: the arm runs at the share they point to last.
        return plan_arm(self.model, name, MacTarget.relative(share), self.budget, seed,
                        dense_macs=self.dense_macs), share, probes

    def _chain(self, steps: list[dict[str, Any]], run_dir: Path, seed: int) -> Any:
        """``steps`` run as a chain into ``run_dir`` under ``seed`` with the comparison's training subset: its
        ``chain.json`` reproduces the run alone. The chain does not time its model: :meth:`_time` does, as
        deployed."""
        config = parse_chain({"seed": seed, "train_images": self.budget.train_images, "steps": steps},
                             onnx=False)
        speed = replace(self.ctx.speed, enabled=False)
        resume = self.ctx.resume
        shared = _shared_start(steps, self.chains.get(seed, []))
        if shared is not None and not on_main(lambda: (run_dir / CHAIN_FILE).exists()):
            earlier, count = shared
            on_main(lambda: start_from(run_dir, earlier, count))
            resume = True
            self.log(f"  step{'s 1-' if count > 1 else ' '}{count} as run in {earlier} (the same settings and seed)")
        return run_chain(self.model, self.data, config, replace(self.ctx, run_dir=run_dir, speed=speed, resume=resume))

    def _time(self, final: nn.Module, *, primary_only: bool = False) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """``final`` timed as deployed against the dense model (rank 0 times, every rank gets it; nothing without
        ``ctx.speed``), and the pick's row of it: the first runtime at ``ctx.speed``'s batch (``primary_only``: that
        row alone is timed, as a speedup target's probes are)."""
        if not self.ctx.speed.enabled:
            return {}, None
        timing = self.timing if not primary_only else {
            **self.timing, "batches": [self.ctx.speed.batch_size], "runtimes": self.timing["runtimes"][:1]}
        deployed = on_main(lambda: time_deployed(final, self.model, speed=self.ctx.speed, device=self.ctx.device,
                                                 **timing))
        primary = next((row for row in deployed["timings"]
                        if row["runtime"] == self.timing["runtimes"][0] and row["batch"] == self.ctx.speed.batch_size),
                       None)
        return deployed, primary

    def run(self, arm: Arm, target: Target | None, share: float | None, run_dir: Path, seed: int,
            probes: list[dict[str, Any]] | None = None, spent: float = 0.0) -> ArmResult:
        """Run ``arm``'s chain (its steps seeded with ``seed``) into ``run_dir`` and score it (``target`` ``None``:
        the control; ``spent``: seconds its probes took)."""
        stored = self._stored(run_dir)
        if stored is not None:
            return stored
        arm = replace(arm, steps=self._reuse(arm.steps, seed))
        self.number += 1
        where = f" ({target.describe()})" if target is not None else ""
        self.log(f"[bold]{self.number}/{self.total} {arm.name}{where}, seed {seed}[/]: "
                 f"{' → '.join(step['method'] for step in arm.steps)}")
        base = ArmResult(arm.name, arm.title, None if target is None else target.label, DONE, steps=arm.steps,
                         share=share, run_dir=str(run_dir), probes=probes, seed=seed)
        begin = time.perf_counter()
        try:
            chain = self._chain(arm.steps, run_dir, seed)
            self._remember(arm.steps, run_dir, seed)
            final = load(run_dir / RUN_MODEL_DIR, map_location=self.ctx.device).eval()
            deployed, primary = self._time(final)
        except VitpruneError as exc:
            status = UNREACHABLE if isinstance(exc, UnreachableTargetError) else FAILED
            result = replace(base, status=status, reason=str(exc), seconds=spent + time.perf_counter() - begin)
            on_main(lambda: write_json(run_dir / ARM_FILE, {"result": result.to_dict()}))
            self.log(f"  {arm.name}{where} stopped: {exc}")
            return result
        correct = evaluate(final, self.loader, per_image=True)["correct"].numpy()
        macs = chain.pruned["macs_full"]
        timing = primary if primary is not None and "error" not in primary else {}
        met = _met(target, share, macs / self.dense_macs, timing)
        result = replace(base, top1=100 * float(correct.mean()), interval=list(top1_interval(correct)),
                         params=chain.pruned["params"], macs=macs, macs_share=macs / self.dense_macs, met=met,
                         reason=None if met is not False else _off_target(target, share, macs / self.dense_macs,
                                                                           timing),
                         speedup=timing.get("speedup"), speedup_q1=timing.get("speedup_q1"),
                         speedup_q3=timing.get("speedup_q3"), timings=deployed.get("timings"),
                         memory=deployed.get("memory"), seconds=spent + time.perf_counter() - begin)
        on_main(lambda: write_json(run_dir / ARM_FILE, {"result": result.to_dict(),
                                                        "correct": pack_correct(correct)}))
        self.scores[result.run_dir] = correct
        self._eta(result)
        return result

    def _eta(self, result: ArmResult) -> None:
        """One line after each run this call ran: what it found, how long it took, and the time left at the mean of
        the runs so far."""
        self.ran.append(result.seconds or 0.0)
        left = (self.total - self.number) * sum(self.ran) / len(self.ran)
        found = (f"top-1 {result.top1:.2f}%, {result.macs_share:.1%} of the MACs"
                 + (f", {result.speedup:.2f}×" if result.speedup is not None else ""))
        self.log(f"  {self.number}/{self.total} {result.arm} done in {duration(result.seconds)} ({found}); about "
                 f"{duration(left)} left")


def _fastest(probes: list[dict[str, Any]]) -> str:
    """The fastest a speedup target's probes found, as an unreachable arm's reason ends."""
    if not probes:
        return ""
    best = max(probes, key=lambda p: p["speedup"])
    return f"; the fastest it found is {best['speedup']:.2f}× at {best['macs_share']:.1%} of the MACs"


def _next_share(probes: list[dict[str, Any]], factor: float) -> float:
    """The MAC share expected to run ``factor`` times faster: speedup taken as ``c * macs_share ** -g`` through the
    last two probes (``g`` = 1, speed in proportion to MACs, after one), within :data:`SHARES`. Where it points at or
    past a share already probed (at or above one too slow, at or below one fast enough), the geometric middle of the
    bracket the probes make instead, so timing noise cannot send the search back where it has been."""
    last = probes[-1]
    g = 1.0
    if len(probes) > 1:
        before = probes[-2]
        run = math.log(last["macs_share"]) - math.log(before["macs_share"])
        rise = math.log(last["speedup"]) - math.log(before["speedup"])
        if run * rise < 0:  # speed rises as MACs fall: the power law's exponent
            g = -rise / run
    share = min(max(last["share"] * (last["speedup"] / factor) ** (1 / g), SHARES[0]), SHARES[1])
    slow = [p["share"] for p in probes if p["speedup"] < factor]
    fast = [p["share"] for p in probes if p["speedup"] >= factor]
    if (slow and share >= min(slow)) or (fast and share <= max(fast)):
        share = math.sqrt(max(fast, default=SHARES[0]) * min(slow, default=SHARES[1]))
    return share


def _met(target: Target | None, share: float | None, macs_share: float, timing: dict[str, Any]) -> bool | None:
    """On target: MACs within :data:`MATCH` of the share, or the speedup within the measured quartiles."""
    if target is None:
        return None
    if target.kind == "macs":
        return abs(macs_share / share - 1) <= MATCH
    return bool(timing) and timing["speedup_q1"] <= target.value <= timing["speedup_q3"]


def _median_speed(runs: list[ArmResult]) -> dict[str, Any]:
    """The runs' speed as one arm's: each statistic's median over the seeds (speedup, quartiles, and each timing's
    speedups and milliseconds), the largest memory."""
    def median(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return float(np.median(known)) if known else None

    speed = {key: median([getattr(run, key) for run in runs]) for key in ("speedup", "speedup_q1", "speedup_q3")}
    timings = None
    if runs[0].timings is not None:
        timings = []
        for rows in zip(*(run.timings for run in runs)):
            if any("error" in row for row in rows):
                timings.append(next(row for row in rows if "error" in row))
                continue
            timings.append({**rows[0], **{key: median([row[key] for row in rows])
                                          for key in ("speedup", "speedup_q1", "speedup_q3", "ms", "dense_ms")}})
    memory = None
    if runs[0].memory is not None:
        memory = {key: max((run.memory[key] for run in runs if run.memory[key] is not None), default=None)
                  for key in runs[0].memory}
    return {**speed, "timings": timings, "memory": memory}


def _off_target(target: Target, share: float, macs_share: float, timing: dict[str, Any]) -> str:
    """Why a scored arm is off ``target``: where it landed."""
    if target.kind == "macs":
        return f"off target: {macs_share:.1%} of the MACs, aimed at {share:.1%}"
    if not timing:
        return "off target: its speed was not measured"
    return (f"off target: {timing['speedup']:.2f}× [{timing['speedup_q1']:.2f}, {timing['speedup_q3']:.2f}] measured, "
            f"aimed at {target.value:g}×")


def _pick(results: list[ArmResult], control: ArmResult, label: str, config: CompareConfig, run_dir: Path,
          scores: dict[str, np.ndarray]) -> dict[str, Any] | None:
    """:func:`~vitprune.comparison.pick.choose` among the arms scored at target ``label``, with the command that runs
    the pick alone."""
    scored = [r for r in results if r.target == label and r.status == DONE]
    chosen = choose(scored, control if control.status == DONE else None, lambda r: scores[r.run_dir],
                    objective=config.objective, tolerance=config.tolerance)
    if chosen is None:
        return None
    first = next(r for r in scored if r.arm == chosen["arm"]).seeds[0]
    steps = Path(run_dir) / ARMS_DIR / label / chosen["arm"] / f"seed-{first}" / "chain.json"
    return {**chosen, "seed": first, "command": f"vitprune chain {config.model} --data {config.data} --steps {steps} "
                                 f"--out {run_dir.name}-{chosen['arm']}"}


def _seconds(control: ArmResult, results: list[ArmResult], wall: float) -> float:
    """The comparison's wall time: the runs' own (a resumed comparison's arms count the time they took) where that
    is more than this call's."""
    runs = sum(r.seconds or 0.0 for r in [control, *results])
    return max(wall, runs)


def _write(report: CompareReport, run_dir: Path) -> None:
    write_json(run_dir / "report.json", report.to_dict())
    write_page(report, run_dir)


__all__ = ["ARMS_DIR", "ARM_FILE", "CONTROL", "MATCH", "PLAN_FILE", "PROBES", "compare"]
