"""The HetDPT pipeline: how many layers of each type (Step 1), which ones (Step 2), fine-tune and merge (Stage 2).

Every stage writes what it decided into the run directory before the next starts, so an
interrupted run picks up where it stopped and a finished stage is never redone:

    run_dir/predictor_points.json   Step 1 data: (a, t, top-1) per prune -> fast fine-tune -> evaluate round
    run_dir/predictor.json          the fitted predictor (reusable for any budget: --predictor)
    run_dir/predictor.png           its accuracy surface, the budget line and the chosen split
    run_dir/selection.json          Step 2: the chosen blocks and their importance scores
    run_dir/finetune/               Stage 2 fine-tuning run (checkpoints, metrics.jsonl)
    run_dir/model/                  the pruned, fine-tuned and merged model (recipe + weights)
    run_dir/report.json             accuracies, params, MACs (both conventions), speed, time per stage
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from vitprune.adapters import get_adapter
from vitprune.atomic import read_json, write_json
from vitprune.config import setting
from vitprune.data import balanced_subset, build_loader
from vitprune.errors import VitpruneError
from vitprune.measure import CONVENTIONS, SpeedConfig, count_macs
from vitprune.methods.hetdpt.collect import INTERLEAVED_ORDERS, collect_predictor_data
from vitprune.methods.hetdpt.entropy import transfer_entropy
from vitprune.methods.hetdpt.importance import select_layers
from vitprune.methods.hetdpt.plots import plot_predictor
from vitprune.methods.hetdpt.predictor import fit_predictor, load_predictor, save_predictor, search_split
from vitprune.methods.report import REPORT_FILE, Report
from vitprune.methods.stages import Stages, prepare_run_dir, time_against
from vitprune.recipe import RUN_MODEL_DIR, save
from vitprune.surgery import (
    ATTENTION_IDENTITIES, IDENTITY_HELP, OUTPUT_GELU_HELP, merge_linear_mlps, prune_depth, remaining_layers,
    remove_depth_gates,
)
from vitprune.training import KINDS, TrainConfig, evaluate, finetune_pruned

#: What HetDPT needs of a model's family (:data:`vitprune.adapters.CAPABILITIES`).
REQUIRES = ("attention_removal", "activation_removal", "gates")
POINTS_FILE, PREDICTOR_FILE, PREDICTOR_PLOT, SELECTION_FILE = (
    "predictor_points.json", "predictor.json", "predictor.png", "selection.json")
FINETUNE_DIR, MODEL_DIR = "finetune", RUN_MODEL_DIR


@dataclass
class HetDPTConfig:
    """Every setting of the pipeline; :func:`preset` gives tested starting points, :func:`configure` changes them."""

    #: What a removed attention leaves (:data:`vitprune.surgery.ATTENTION_IDENTITIES`).
    identity: str = setting("norm", choices=ATTENTION_IDENTITIES, help=IDENTITY_HELP)
    #: The reference code's GELU after blocks that lost both layers (compatibility only).
    output_gelu: bool = setting(False, flag="--output-gelu", help=OUTPUT_GELU_HELP)
    # Step 1: predictor data and fit.
    #: Fast fine-tune after each removal while collecting predictor data.
    probe: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=10, lr=5e-5, batch_size=128))
    #: Class-balanced training subset the fast fine-tunes run on (``None``: the whole training set).
    probe_images: int | None = None
    #: Training images the transfer entropy is estimated on.
    te_images: int = 2048
    #: Layers per type removed by the single-type sweeps (Algorithm 1); ``None``: the budget, at most L.
    sweep_layers: int | None = None
    #: Rounds of the interleaved sweep (Algorithm 2), one layer of each type per round; ``None``: budget // 2,
    #: which reaches the even split on the budget line.
    interleaved_rounds: int | None = None
    #: Which type the interleaved sweep removes first in each round.
    interleaved_order: str = "attention-first"
    degrees: tuple[int, ...] = (1, 2, 3, 4)
    min_per_type: int = setting(0, min=0, help="Predictor search: remove at least this many of each type.")
    # Step 2: learnable importance.
    search: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=20, lr=5e-5, batch_size=128))
    prune_fraction: float = 0.5
    #: Restrict each type to its ``shortlist`` lowest-TE layers (``None``: every layer is a candidate).
    shortlist: int | None = setting(None, min=1, help="Step 2 chooses among each type's N lowest-TE layers.")
    # Stage 2: fine-tuning (``None``: prune and merge only, e.g. when a chain fine-tunes later).
    finetune: TrainConfig | None = field(default_factory=lambda: TrainConfig(epochs=100, lr=5e-5, batch_size=128,
                                                                      warmup_epochs=5))
    distill: str = setting("none", choices=KINDS, help="Self-distillation from the unpruned model in Stage 2.")
    alpha: float = 0.5
    tau: float = 1.0
    #: Stage 2 starts from the ``original`` weights (the reference code) or from the Step-2 ``search`` ones.
    init: str = "original"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    def validate(self) -> None:
        """Fail at once, not after hours of earlier stages, on a setting a later stage would reject."""
        choices = {"identity": ATTENTION_IDENTITIES, "distill": KINDS, "init": ("original", "search"),
                   "interleaved_order": INTERLEAVED_ORDERS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise VitpruneError(f"unknown {name} {getattr(self, name)!r} (choose from: {', '.join(allowed)})")
        for stage in (self.probe, self.search, self.finetune):
            if stage is not None:
                stage.validate()


@dataclass
class HetDPTReport(Report):
    """What :func:`run_hetdpt` did and measured; ``run_dir/report.json`` holds its :meth:`to_dict`."""

    budget: int
    #: ``attention`` and ``activation`` layers removed, ``chosen_by`` the ``predictor`` or the ``user``.
    split: dict[str, Any]
    #: Blocks whose attention was removed, and whose activation was (their fc1·fc2 merged).
    attention: list[int]
    activation: list[int]
    merged_blocks: list[int]
    #: Step 1: the predictor's fit, the split it chose and its plot; ``None`` when the split was given.
    predictor: dict[str, Any] | None
    #: Step 2: the chosen layers, their importance scores and the candidates.
    selection: dict[str, Any]
    #: Validation top-1: ``dense``, ``pruned`` (right after removal), ``finetuned`` and ``finetune_best``.
    top1: dict[str, float | None]
    #: Params and MACs in both conventions (:meth:`~vitprune.measure.MacReport.totals`).
    dense: dict[str, int]
    pruned: dict[str, int]
    mac_conventions: dict[str, str]
    #: The pruned model timed against the dense one (``None``: not measured).
    speed: dict[str, Any] | None
    #: Wall time per stage.
    seconds: dict[str, float]
    config: dict[str, Any]
    model_dir: str


def preset(name: str) -> HetDPTConfig:
    """``"digits"``: sized for the embedded digits model inside ``vitprune demo`` (minutes on 2 CPU cores);
    ``"imagenet"``: the reference code's scale (DeiT on ImageNet, GPUs)."""
    if name == "digits":
        return HetDPTConfig(
            probe=TrainConfig(epochs=1, lr=5e-4, batch_size=64),
            probe_images=512, te_images=128,
            search=TrainConfig(epochs=2, lr=5e-4, batch_size=64),
            finetune=TrainConfig(epochs=8, lr=5e-4, batch_size=64, warmup_epochs=1),
            distill="soft")
    if name == "imagenet":
        return HetDPTConfig(
            probe=TrainConfig(epochs=10, lr=5e-5, batch_size=512, warmup_epochs=1),
            probe_images=64_000, te_images=2048, interleaved_rounds=3,
            search=TrainConfig(epochs=20, lr=5e-5, batch_size=512, warmup_epochs=2, label_smoothing=0.1),
            finetune=TrainConfig(epochs=400, lr=4e-4, min_lr=1e-5, batch_size=4096, warmup_epochs=10,
                                 weight_decay=0.08, mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1,
                                 ema_decay=0.99996),
            distill="hard")
    raise VitpruneError(f"unknown HetDPT preset {name!r} (choose from: digits, imagenet)")


@dataclass(frozen=True)
class StageOverrides:
    """Shortcuts into a preset's stage configs (``None``: the preset's value), for :func:`configure`."""

    epochs: int | None = setting(None, min=1, help="Stage-2 fine-tuning epochs.")
    search_epochs: int | None = setting(None, min=1, help="Step-2 importance epochs.")
    probe_epochs: int | None = setting(None, min=1, help="Fast fine-tune epochs per predictor point.")
    lr: float | None = setting(None, help="Stage-2 peak learning rate (default: the preset's, scaled with the batch).")
    batch_size: int | None = setting(None, short="-b", min=1,
                                     help="Global batch for every stage; each stage's lr scales with it.")

    def apply(self, config: HetDPTConfig) -> HetDPTConfig:
        """``config`` with these changes; a new batch scales each stage's lr (:meth:`TrainConfig.at_batch`)
        unless an lr is given."""
        stages = {"probe": config.probe, "search": config.search, "finetune": config.finetune}
        changes = {"probe": {"epochs": self.probe_epochs}, "search": {"epochs": self.search_epochs},
                   "finetune": {"epochs": self.epochs, "lr": self.lr}}
        for stage, train in stages.items():
            if train is None:
                continue
            if self.batch_size is not None:
                train = train.at_batch(self.batch_size)
            stages[stage] = replace(train, **{k: v for k, v in changes[stage].items() if v is not None})
        return replace(config, **stages)


#: The :class:`StageOverrides` that reach Steps 1 and 2 (a HetDPT run without its own Stage 2, such as a chain
#: step, takes only these).
STEP_OVERRIDES = ("probe_epochs", "search_epochs", "batch_size")


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


def run_hetdpt(model: nn.Module, train_set: Dataset, val_set: Dataset, *, budget: int, run_dir: str | Path,
               split: tuple[int, int] | None = None, config: HetDPTConfig | None = None,
               device: torch.device | str | None = None, progress: bool = False,
               log: Callable[[str], None] = lambda _msg: None, resume: bool = False,
               predictor: str | Path | None = None, speed: SpeedConfig = SpeedConfig()) -> HetDPTReport:
    """Remove ``budget`` layers (attention + activation) from a copy of ``model`` the HetDPT way; returns the report.

    ``split`` fixes how many of each type (attention, activation); ``None`` lets the predictor
    choose, fitted here or loaded from ``predictor`` (an earlier run's ``predictor.json``: one fit
    serves every budget). The pruned, fine-tuned, merged model is saved to ``run_dir/model``. With
    ``resume``, finished stages found in ``run_dir`` are reused and the fine-tuning run continues
    from its checkpoint; without it, a ``run_dir`` holding a previous run is an error.
    """
    get_adapter(model).require(*REQUIRES, by="HetDPT")
    config = config or HetDPTConfig()
    config.validate()
    speed.validate()
    check_budget(model, budget, split)
    run_dir = prepare_run_dir(run_dir, resume)
    if predictor is not None and not Path(predictor).is_file():
        raise VitpruneError(f"predictor file {predictor} does not exist")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    stages = Stages(log)
    num_blocks = len(get_adapter(model).blocks())
    val_loader = build_loader(val_set, (config.finetune or config.search).batch_size, shuffle=False, seed=0)
    dense_top1 = stages.run("evaluate the dense model", lambda: evaluate(model.to(device), val_loader)["top1"])

    step1 = None
    if split is None:
        step1, split = stages.run("step 1: predictor of accuracy per split", lambda: _step1(
            model, train_set, val_set, budget, num_blocks, config, run_dir, device, progress, log, resume,
            predictor))
    selection = stages.run("step 2: learnable importance within each type", lambda: _step2(
        model, train_set, split, config, run_dir, device, progress, resume))

    pruned, recovery = stages.run("stage 2: fine-tune and merge", lambda: prune_and_recover(
        model, selection["attention"], selection["activation"], train_set, val_set, config,
        run_dir=run_dir / FINETUNE_DIR, device=device, progress=progress, resume=resume,
        start=selection.pop("model", None)))
    save(pruned, run_dir / MODEL_DIR, metadata={"hetdpt": {"budget": budget, "split": list(split), **{
        k: selection[k] for k in ("attention", "activation")}}})

    timing = time_against(stages, pruned, model, speed, device=device, progress=progress)
    report = HetDPTReport(
        budget=budget, split={"attention": split[0], "activation": split[1],
                              "chosen_by": "predictor" if step1 is not None else "user"},
        attention=selection["attention"], activation=selection["activation"],
        merged_blocks=recovery.pop("merged_blocks"), predictor=step1, selection=selection,
        top1={"dense": dense_top1, **recovery}, dense=count_macs(model).totals(), pruned=count_macs(pruned).totals(),
        mac_conventions=CONVENTIONS, speed=timing, seconds=stages.seconds, config=config.to_dict(),
        model_dir=str(run_dir / MODEL_DIR))
    write_json(run_dir / REPORT_FILE, report.to_dict())
    return report


def _step1(model: nn.Module, train_set: Dataset, val_set: Dataset, budget: int, num_blocks: int,
           config: HetDPTConfig, run_dir: Path, device: torch.device, progress: bool,
           log: Callable[[str], None], resume: bool,
           reuse: str | Path | None) -> tuple[dict[str, Any], tuple[int, int]]:
    points_path, predictor_path = run_dir / POINTS_FILE, run_dir / PREDICTOR_FILE
    if reuse is not None or (resume and predictor_path.exists()):
        source = Path(reuse) if reuse is not None else predictor_path
        fit = load_predictor(source)
        if reuse is not None:
            save_predictor(fit, predictor_path)
        log(f"  reusing the predictor in {source}")
    else:
        saved = read_json(points_path) if resume and points_path.exists() else None
        probe_set = train_set if config.probe_images is None else balanced_subset(train_set, config.probe_images,
                                                                                    seed=0)
        remaining = remaining_layers(model)
        sweep = min(config.sweep_layers if config.sweep_layers is not None else budget,
                    *(len(blocks) for blocks in remaining.values()))
        rounds = min(config.interleaved_rounds if config.interleaved_rounds is not None else budget // 2, sweep)
        points = collect_predictor_data(
            model, probe_set, val_set, max_attention=sweep, max_activation=sweep,
            interleaved_rounds=rounds, finetune=config.probe, te_images=config.te_images,
            order=config.interleaved_order, identity=config.identity, device=device, progress=progress,
            on_point=lambda pts: write_json(points_path, pts), resume_points=saved)
        write_json(points_path, points)
        fit = fit_predictor([(p["a"], p["t"], p["top1"]) for p in points], degrees=config.degrees)
        save_predictor(fit, predictor_path)
    chosen = search_split(fit, budget, num_blocks, min_per_type=config.min_per_type)
    plot_predictor(fit, run_dir / PREDICTOR_PLOT, num_layers=num_blocks, split=chosen)
    log(f"  predictor: degree {fit.degree}, L2OCV MAE {fit.mae:.3f}, RMSE {fit.rmse:.3f}; "
        f"split {chosen.attention} attention + {chosen.activation} activation "
        f"(predicted {chosen.predicted:.2f}%)")
    summary = {"fit": fit.to_dict(), "split": asdict(chosen), "plot": str(run_dir / PREDICTOR_PLOT)}
    return summary, (chosen.attention, chosen.activation)


def _step2(model: nn.Module, train_set: Dataset, split: tuple[int, int], config: HetDPTConfig, run_dir: Path,
           device: torch.device, progress: bool, resume: bool) -> dict[str, Any]:
    path = run_dir / SELECTION_FILE
    if resume and path.exists() and config.init == "original":
        selection = read_json(path)
        if (len(selection["attention"]), len(selection["activation"])) == split:
            return selection
    # A fine-tuning run left by an earlier selection would resume into the wrong structure.
    shutil.rmtree(run_dir / FINETUNE_DIR, ignore_errors=True)
    candidates = None
    if config.shortlist is not None:
        loader = build_loader(balanced_subset(train_set, config.te_images, seed=0), 64, shuffle=False, seed=0)
        candidates = {kind: sorted(te := transfer_entropy(model, kind, loader, identity=config.identity),
                                   key=te.get)[:config.shortlist] for kind in ("attention", "activation")}
    result = select_layers(model, train_set, config.search, attention=split[0], activation=split[1],
                           candidates=candidates, identity=config.identity, prune_fraction=config.prune_fraction,
                           device=device)
    selection = {**result.to_dict(), "candidates": candidates}
    write_json(path, selection)
    if config.init == "search":
        remove_depth_gates(result.model)
        selection["model"] = result.model
    return selection


def prune_and_recover(model: nn.Module, attention: list[int], activation: list[int], train_set: Dataset,
                      val_set: Dataset, config: HetDPTConfig, *, run_dir: str | Path | None = None,
                      device: torch.device | str | None = None, progress: bool = False, resume: bool = False,
                      start: nn.Module | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """Stage 2 for a given choice of layers: remove them, fine-tune with fc1/fc2 apart, then merge.

    Works on a copy of ``start`` (default: ``model``); ``model`` is the teacher when ``config``
    distils. ``run_dir`` keeps the fine-tuning run's checkpoints (resumable with ``resume``).
    Returns the merged model and ``{"pruned", "finetuned", "finetune_best"}`` top-1 on
    ``val_set`` (right after removal, at the end, best epoch) with the ``merged_blocks``; without
    ``config.finetune`` only ``"pruned"``.
    """
    device = torch.device(device) if device is not None else next(model.parameters()).device
    pruned = copy.deepcopy(start if start is not None else model).to(device)
    prune_depth(pruned, attention, activation, identity=config.identity, output_gelu=config.output_gelu, merge=False)
    val_loader = build_loader(val_set, (config.finetune or config.search).batch_size, shuffle=False, seed=0)
    top1 = {"pruned": evaluate(pruned, val_loader)["top1"]}
    if config.finetune is not None:
        history = finetune_pruned(pruned, train_set, val_set, config.finetune, teacher=model,
                                  distill=config.distill, alpha=config.alpha, tau=config.tau, run_dir=run_dir,
                                  device=device, progress=progress, resume=resume)
        top1 |= {"finetuned": evaluate(pruned, val_loader)["top1"],
                 "finetune_best": max((h["val_top1"] for h in history), default=None)}
    return pruned, {**top1, "merged_blocks": merge_linear_mlps(pruned)}
