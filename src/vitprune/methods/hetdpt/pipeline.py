"""The HetDPT pipeline: how many layers of each type (Step 1), which ones (Step 2), fine-tune and merge (Stage 2).

Every stage writes what it decided into the run directory before the next starts, so an
interrupted run picks up where it stopped and a finished stage is never redone:

    run_dir/predictor_points.json   Step 1 data: (a, t, top-1) per prune -> fast fine-tune -> evaluate round
    run_dir/predictor.json          the fitted predictor (reusable for any budget: --predictor)
    run_dir/predictor.png           its accuracy surface, the budget line and the chosen split
    run_dir/search/                 Step 2's training of the gated model (checkpoints with the removals so far,
                                    metrics.jsonl)
    run_dir/selection.json          Step 2: the chosen blocks and their importance scores
    run_dir/finetune/               Stage 2 fine-tuning run (checkpoints, metrics.jsonl)
    run_dir/model/                  the pruned, fine-tuned and merged model (recipe + weights; fc1 and fc2 kept
                                    apart with ``merge`` off, for ``vitprune prune merge`` after recovery)
    run_dir/report.json             accuracies, params, MACs (both conventions), speed, time per stage
"""

from __future__ import annotations

import copy
import functools
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from vitprune.adapters import get_adapter
from vitprune.atomic import read_json, write_json
from vitprune.data import balanced_subset, build_loader
from vitprune.errors import UnreachableTargetError, VitpruneError
from vitprune.measure import count_macs, format_count
from vitprune.measure.target import MacTarget, first, goal
from vitprune.methods.hetdpt.analysis import LAYER_TYPES
from vitprune.methods.hetdpt.collect import collect_predictor_data
from vitprune.methods.hetdpt.config import REQUIRES, HetDPTConfig, HetDPTRun, StageOverrides
from vitprune.methods.hetdpt.entropy import transfer_entropy
from vitprune.methods.hetdpt.importance import select_layers, shortlist_size
from vitprune.methods.hetdpt.plots import plot_predictor
from vitprune.methods.hetdpt.predictor import PredictorFit, fit_predictor, load_predictor, save_predictor, search_split
from vitprune.recipe import RUN_MODEL_DIR
from vitprune.runs.context import MethodData, RunContext, method_run
from vitprune.runs.report import REPORT_FILE, RunReport  # noqa: F401  (REPORT_FILE: the run directory's layout)
from vitprune.runs.stages import Stages, available_images, calibration_loader, finish_run, open_run, recover
from vitprune.surgery import merge_linear_mlps, prune_depth, remaining_layers, remove_depth_gates
from vitprune.training import TrainConfig, evaluate
from vitprune.training.distributed import DistContext, on_main

POINTS_FILE, PREDICTOR_FILE, PREDICTOR_PLOT, SELECTION_FILE = (
    "predictor_points.json", "predictor.json", "predictor.png", "selection.json")
SEARCH_DIR, FINETUNE_DIR, MODEL_DIR = "search", "finetune", RUN_MODEL_DIR


@dataclass
class HetDPTReport(RunReport):
    """What :func:`run_hetdpt` did and measured; ``run_dir/report.json`` holds its :meth:`to_dict`."""

    budget: int
    #: ``attention`` and ``activation`` layers removed, ``chosen_by`` the ``predictor`` or the ``user``.
    split: dict[str, Any]
    #: Blocks whose attention was removed, and whose activation was; those whose fc1·fc2 were merged (none with
    #: ``merge`` off).
    attention: list[int]
    activation: list[int]
    merged_blocks: list[int]
    #: Step 1: the predictor's fit, the split it chose and its plot; ``None`` when the split was given.
    predictor: dict[str, Any] | None
    #: Step 2: the chosen layers, their importance scores, the shortlisted candidates and the TE of every layer they
    #: were shortlisted by (``None``: no shortlist).
    selection: dict[str, Any]
    #: The pipeline's settings; ``top1`` holds ``dense``, ``pruned`` (right after removal), ``finetuned`` and
    #: ``finetune_best``.
    config: dict[str, Any]


def preset(name: str) -> HetDPTConfig:
    """``"digits"``: sized for the embedded digits model inside ``vitprune demo`` (minutes on 2 CPU cores);
    ``"imagenet-hetdpt"`` (alias ``"imagenet"``): the paper's recipe at its code's scale (DeiT on ImageNet, 8 GPUs),
    the training presets of :mod:`vitprune.training.presets`: Step 1's fast fine-tunes ``imagenet-hetdpt-step1``,
    Step 2's search ``imagenet-hetdpt-step2``, Stage 2's fine-tune and distillation ``imagenet-hetdpt``; the
    predictor's data on a 64,000-image class-balanced subset (the note's ~5% reading of the paper's "representative
    subset"), transfer entropy on 2,048 images, and an interleaved sweep of 3 rounds (the paper's data stop at 3+3)."""
    from vitprune.training.presets import get_preset

    if name == "digits":
        return HetDPTConfig(
            probe=TrainConfig(epochs=1, lr=5e-4, batch_size=64),
            probe_images=512, te_images=128,
            search=TrainConfig(epochs=2, lr=5e-4, batch_size=64),
            finetune=TrainConfig(epochs=8, lr=5e-4, batch_size=64, warmup_epochs=1),
            distill="soft")
    if name in ("imagenet", "imagenet-hetdpt"):
        stage2 = get_preset("imagenet-hetdpt")
        return HetDPTConfig(
            probe=get_preset("imagenet-hetdpt-step1").train, probe_images=64_000, te_images=2048,
            interleaved_rounds=3, search=get_preset("imagenet-hetdpt-step2").train, finetune=stage2.train,
            distill=stage2.distill.distill, alpha=stage2.distill.alpha, tau=stage2.distill.tau)
    raise VitpruneError(f"unknown HetDPT preset {name!r} (choose from: digits, imagenet-hetdpt, imagenet)")


#: The :class:`StageOverrides` that reach Steps 1 and 2 (a HetDPT run without its own Stage 2, such as a chain
#: step, takes only these).
STEP_OVERRIDES = ("probe_epochs", "search_epochs", "batch_size", "workers", "seed")


def configure(name: str, **settings: Any) -> HetDPTConfig:
    """:func:`preset` ``name`` changed by ``settings``: :class:`StageOverrides`' fields and :class:`HetDPTConfig`'s
    own (a ``None`` keeps the preset's value). The command line's options are these names."""
    stage_names = {f.name for f in fields(StageOverrides)}
    config = StageOverrides(**{k: v for k, v in settings.items() if k in stage_names}).apply(preset(name))
    changes = {k: v for k, v in settings.items() if k not in stage_names and v is not None}
    unknown = sorted(set(changes) - {f.name for f in fields(HetDPTConfig)})
    if unknown:
        raise VitpruneError(f"unknown HetDPT setting(s) {', '.join(unknown)}")
    return replace(config, **changes)


def parse_split(text: str) -> tuple[int, int] | None:
    """``"auto"`` -> ``None`` (the predictor decides); ``"A,G"`` -> (attention, activation) layers to remove."""
    if text == "auto":
        return None
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise VitpruneError(f"split takes 'auto' or two counts 'A,G' (attention, activation), got {text!r}")
    return int(parts[0]), int(parts[1])


def check_budget(model: nn.Module, budget: int, split: tuple[int, int] | None) -> None:
    """A budget of at least 1 and at most the layers the model has; a split that adds up to it and fits."""
    attention, activation = (len(blocks) for blocks in remaining_layers(model).values())
    if not 1 <= budget <= attention + activation:
        raise VitpruneError(f"budget {budget} is out of range: the model has {attention} attention and "
                            f"{activation} activation layers ({attention + activation} in all)")
    if split is None:
        return
    if sum(split) != budget:
        raise VitpruneError(f"split {split[0]},{split[1]} removes {sum(split)} layers, not the budget of {budget}")
    for kind, wanted, have in (("attention", split[0], attention), ("activation", split[1], activation)):
        if wanted > have:
            raise VitpruneError(f"split asks for {wanted} {kind} layers, but the model has only {have}")


def budget_for_macs(model: nn.Module, target: MacTarget) -> int:
    """The most layers HetDPT can remove from ``model`` (merged as it deploys them) and still cost more than
    ``target``, whatever the split and whichever layers: ``k`` removals of the costliest layer, counted by
    :func:`~vitprune.measure.target.first` (one removal fewer than the first ``k`` that would reach the target), at
    most every layer. A later step (a neuron or width trim) reaches the target itself. A target at or above the
    model's MACs is one line (:func:`~vitprune.measure.target.goal`); one that even the smallest removal goes below
    (no whole layer fits above it) is an :class:`~vitprune.errors.UnreachableTargetError` naming what that removal
    leaves."""
    wanted, base = goal(target, model)
    savings = []
    for kind, blocks in remaining_layers(model).items():
        for block in blocks:
            trial = copy.deepcopy(model)
            prune_depth(trial, **{kind: [block]})
            savings.append(base - count_macs(trial, convention=target.convention).macs)
    most = max(savings, default=0)
    reaching = first(lambda k: base - k * most <= wanted, 0, len(savings), integer=True) if most > 0 else None
    budget = len(savings) if reaching is None else int(reaching) - 1
    if budget == 0:
        nearest = f"; the smallest removal leaves {format_count(base - min(savings))}" if savings else ""
        raise UnreachableTargetError(f"HetDPT removes whole layers, and none fits above {format_count(wanted)} MACs "
                                     f"per image ({target.convention} convention){nearest}")
    return budget


@method_run
def run_hetdpt(model: nn.Module, data: MethodData, config: HetDPTRun, ctx: RunContext) -> HetDPTReport:
    """Remove ``config.budget`` layers (attention + activation) from a copy of ``model`` the HetDPT way; returns the
    report.

    ``config.split`` fixes how many of each type (attention, activation); ``None`` lets the predictor
    choose, fitted here or loaded from ``config.predictor`` (an earlier run's ``predictor.json``: one fit
    serves every budget). Transfer entropy (Step 1's removals, Step 2's shortlist) is estimated on
    images of ``data.calibration``: the training images with the evaluation transform, which the CLI
    passes (default ``data.train``, augmented). The pruned, fine-tuned, merged model (unmerged with
    ``config.config.merge`` off) is saved to ``ctx.run_dir/model``. With ``ctx.resume``, finished stages found in
    the run directory are reused and the fine-tuning run continues from its checkpoint; without it, a
    run directory holding a previous run is an error.

    Under torchrun (every process calls it with the same arguments) each process estimates
    the transfer entropy on its share of the calibration images (reduced over all of them), every
    fine-tune (Step 1's fast ones, Step 2's search, Stage 2) is data-parallel, and rank 0 alone
    evaluates Step 1's points, reads and writes the run directory and times the model; every process
    gets what it read or decided and returns the same report.
    """
    budget, split, predictor, settings = config.budget, config.split, config.predictor, config.config
    train_set, val_set, calibration_set = data.train, data.val, data.calibration
    get_adapter(model, needs=REQUIRES, by="HetDPT")
    settings.validate()
    ctx.speed.validate()
    check_budget(model, budget, split)
    run_dir, device, stages = open_run(model, ctx, seed=settings.search.seed)
    progress, resume, dist, log = ctx.progress, ctx.resume, ctx.dist, ctx.log
    settings = available_images(settings, data.calibration_or_train, ("te_images",), log)
    settings = available_images(settings, train_set, ("probe_images",), log)
    if predictor is not None and not on_main(Path(predictor).is_file):
        raise VitpruneError(f"predictor file {predictor} does not exist")
    num_blocks = len(get_adapter(model).blocks())
    val_loader = build_loader(val_set, (settings.finetune or settings.search).batch_size, shuffle=False, seed=0)
    dense_top1 = stages.run("evaluate the dense model", lambda: evaluate(model, val_loader)["top1"])

    step1 = None
    if split is None:
        step1, split = stages.run("step 1: predictor of accuracy per split", lambda: _step1(
            model, train_set, val_set, calibration_set, budget, num_blocks, settings, run_dir, device, progress, log,
            resume, predictor, dist))
    selection = stages.run("step 2: learnable importance within each type", lambda: _step2(
        model, train_set, data.calibration_or_train, split, settings, run_dir, device, resume, dist))

    pruned, recovery = stages.run("stage 2: fine-tune and merge", lambda: prune_and_recover(
        model, selection["attention"], selection["activation"], train_set, val_set, settings,
        run_dir=run_dir / FINETUNE_DIR, device=device, progress=progress, resume=resume,
        start=selection.pop("model", None), dist=dist))
    metadata = {"hetdpt": {"budget": budget, "split": list(split),
                           **{k: selection[k] for k in ("attention", "activation")}}}
    return finish_run(
        HetDPTReport, pruned, model, ctx, stages=stages, device=device,
        top1={"dense": dense_top1, **{k: v for k, v in recovery.items() if k != "merged_blocks"}}, metadata=metadata,
        budget=budget, split={"attention": split[0], "activation": split[1],
                              "chosen_by": "predictor" if step1 is not None else "user"},
        attention=selection["attention"], activation=selection["activation"],
        merged_blocks=recovery["merged_blocks"], predictor=step1, selection=selection, config=settings.to_dict())


def _step1(model: nn.Module, train_set: Dataset, val_set: Dataset, te_set: Dataset | None, budget: int,
           num_blocks: int, config: HetDPTConfig, run_dir: Path, device: torch.device, progress: bool,
           log: Callable[[str], None], resume: bool, reuse: str | Path | None,
           dist: DistContext | None) -> tuple[dict[str, Any], tuple[int, int]]:
    points_path, predictor_path = run_dir / POINTS_FILE, run_dir / PREDICTOR_FILE
    # Rank 0 reads and writes the run directory; on_main hands every process what it read, so all take one branch.
    fit = on_main(lambda: _reused_predictor(reuse, predictor_path, resume))
    if fit is not None:
        log(f"  reusing the predictor in {reuse if reuse is not None else predictor_path}")
    else:
        saved = on_main(lambda: read_json(points_path) if resume and points_path.exists() else None)
        probe_set = train_set if config.probe_images is None else balanced_subset(train_set, config.probe_images,
                                                                                    seed=0)
        remaining = remaining_layers(model)
        sweep = min(config.sweep_layers if config.sweep_layers is not None else budget,
                    *(len(blocks) for blocks in remaining.values()))
        rounds = min(config.interleaved_rounds if config.interleaved_rounds is not None else budget // 2, sweep)
        points = collect_predictor_data(
            model, probe_set, val_set, max_attention=sweep, max_activation=sweep,
            interleaved_rounds=rounds, finetune=config.probe, te_set=te_set, te_images=config.te_images,
            te_once=config.te_once,
            order=config.interleaved_order, identity=config.identity, output_gelu=config.output_gelu,
            device=device, progress=progress,
            on_point=lambda pts: on_main(lambda: write_json(points_path, pts)), resume_points=saved, dist=dist)

        def fit_and_save() -> PredictorFit:
            write_json(points_path, points)
            fitted = fit_predictor([(p["a"], p["t"], p["top1"]) for p in points], degrees=config.degrees)
            save_predictor(fitted, predictor_path)
            return fitted

        fit = on_main(fit_and_save)
    chosen = search_split(fit, budget, num_blocks, min_per_type=config.min_per_type)
    on_main(lambda: plot_predictor(fit, run_dir / PREDICTOR_PLOT, num_layers=num_blocks, split=chosen))
    log(f"  predictor: degree {fit.degree}, L2OCV MAE {fit.mae:.3f}, RMSE {fit.rmse:.3f}; "
        f"split {chosen.attention} attention + {chosen.activation} activation "
        f"(predicted {chosen.predicted:.2f}%)")
    summary = {"fit": fit.to_dict(), "split": asdict(chosen), "plot": str(run_dir / PREDICTOR_PLOT)}
    return summary, (chosen.attention, chosen.activation)


def _reused_predictor(reuse: str | Path | None, path: Path, resume: bool) -> PredictorFit | None:
    """The predictor in ``reuse`` (copied to ``path``), else, resuming, the one at ``path``; ``None``: fit one."""
    if reuse is not None:
        fit = load_predictor(reuse)
        save_predictor(fit, path)
        return fit
    return load_predictor(path) if resume and path.exists() else None


def te_shortlist(te: dict[str, dict[int, float]], split: tuple[int, int], share: float) -> dict[str, list[int]]:
    """Step 2's candidates for removing ``split`` (attention, activation) layers: each type's lowest-TE layers of
    ``te`` (every layer's transfer entropy, by type), :func:`~vitprune.methods.hetdpt.importance.shortlist_size` of
    them for ``share``; ties go to the earlier block."""
    return {kind: sorted(scores, key=lambda b: (scores[b], b))[:shortlist_size(share, len(scores), removing)]
            for (kind, scores), removing in zip(te.items(), split, strict=True)}


def _step2(model: nn.Module, train_set: Dataset, te_set: Dataset, split: tuple[int, int], config: HetDPTConfig,
           run_dir: Path, device: torch.device, resume: bool, dist: DistContext | None) -> dict[str, Any]:
    path = run_dir / SELECTION_FILE
    saved = on_main(lambda: read_json(path) if resume and path.exists() else None)
    if saved is not None and (len(saved["attention"]), len(saved["activation"])) != split:
        # The search and fine-tune of another split would resume into the wrong layers and structure.
        for name in (SEARCH_DIR, FINETUNE_DIR):
            on_main(functools.partial(shutil.rmtree, run_dir / name, ignore_errors=True))
    elif saved is not None and config.init == "original":
        return saved
    candidates = te = None
    if config.shortlist < 1:
        batches = list(calibration_loader(te_set, config.te_images, 64, 0, dist=dist))
        te = {kind: transfer_entropy(model, kind, batches, identity=config.identity, output_gelu=config.output_gelu,
                                     dist=dist)
              for kind in LAYER_TYPES}
        candidates = te_shortlist(te, split, config.shortlist)
    result = select_layers(model, train_set, config.search, attention=split[0], activation=split[1],
                           candidates=candidates, identity=config.identity, output_gelu=config.output_gelu,
                           prune_fraction=config.prune_fraction, device=device, dist=dist, run_dir=run_dir / SEARCH_DIR,
                           resume=resume)
    te_json = None if te is None else {kind: {str(b): v for b, v in scores.items()} for kind, scores in te.items()}
    selection = {**result.to_dict(), "candidates": candidates, "transfer_entropy": te_json}
    on_main(lambda: write_json(path, selection))
    if config.init == "search":
        remove_depth_gates(result.model)
        selection["model"] = result.model
    return selection


def prune_and_recover(model: nn.Module, attention: list[int], activation: list[int], train_set: Dataset,
                      val_set: Dataset, config: HetDPTConfig, *, run_dir: str | Path | None = None,
                      device: torch.device | str | None = None, progress: bool = False, resume: bool = False,
                      start: nn.Module | None = None,
                      dist: DistContext | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """Stage 2 for a given choice of layers: remove them, fine-tune with fc1/fc2 apart, then merge.

    Works on a copy of ``start`` (default: ``model``); ``model`` is the teacher when ``config``
    distils. ``run_dir`` keeps the fine-tuning run's checkpoints (resumable with ``resume``).
    Returns the merged model (unmerged with ``config.merge`` off) and ``{"pruned", "finetuned",
    "finetune_best"}`` top-1 on ``val_set`` (right after removal, at the end, best epoch) with the
    ``merged_blocks``; without ``config.finetune`` only ``"pruned"``. Under torchrun (``dist``) the
    fine-tune is data-parallel (:func:`~vitprune.runs.stages.recover`).
    """
    device = torch.device(device) if device is not None else next(model.parameters()).device
    pruned = copy.deepcopy(start if start is not None else model).to(device)
    prune_depth(pruned, attention, activation, identity=config.identity, output_gelu=config.output_gelu, merge=False)
    val_loader = build_loader(val_set, (config.finetune or config.search).batch_size, shuffle=False, seed=0)
    top1 = recover(Stages(), pruned, model, train_set, val_loader, config.finetune, val_set=val_set,
                   distill=config.distill, alpha=config.alpha, tau=config.tau, run_dir=run_dir, device=device,
                   progress=progress, resume=resume, dist=dist)
    return pruned, {**top1, "merged_blocks": merge_linear_mlps(pruned) if config.merge else []}
