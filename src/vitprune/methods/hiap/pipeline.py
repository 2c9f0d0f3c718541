"""The HiAP pipeline: train weights and gates in one phase, harden, extract, measure, save.

    run_dir/search/             the training run (checkpoints with the gates, metrics.jsonl with the
                                per-layer view of every epoch)
    run_dir/gates.safetensors   the final gate logits
    run_dir/model/              the extracted model: recipe + weights
    run_dir/architecture.png    what each block keeps
    run_dir/report.json         top-1 (dense, hardened-gated, extracted), MAC budget and result, params,
                                MACs (both conventions), paired speed, seconds

As the paper, the extracted model is not fine-tuned again (``vitprune finetune`` can).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from safetensors.torch import save_file
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.atomic import atomic_file
from vitprune.data import build_loader
from vitprune.measure import count_macs
from vitprune.methods.hiap.config import REQUIRES, HiAPRun
from vitprune.methods.hiap.extract import extract
from vitprune.methods.hiap.gates import HiAPGates
from vitprune.methods.hiap.plots import plot_architecture
from vitprune.methods.hiap.search import budget_threshold, fixed_macs, hardened_macs, layer_summary, train_gates
from vitprune.recipe import RUN_MODEL_DIR
from vitprune.runs.context import MethodData, RunContext, method_run
from vitprune.runs.report import REPORT_FILE, RunReport  # noqa: F401  (REPORT_FILE: the run directory's layout)
from vitprune.runs.stages import finish_run, open_run
from vitprune.training import evaluate
from vitprune.training.distributed import on_main
from vitprune.training.engine import logged_epochs

SEARCH_DIR, GATES_FILE, MODEL_DIR = "search", "gates.safetensors", RUN_MODEL_DIR
PLOT_FILE = "architecture.png"


@dataclass
class HiAPReport(RunReport):
    """What :func:`run_hiap` did and measured (its config is :class:`~vitprune.methods.hiap.config.HiAPConfig`);
    ``run_dir/report.json`` holds its :meth:`to_dict`."""

    target_macs: float | None
    #: The hardening threshold of the extraction (0 without a MAC target).
    threshold: float
    #: MACs the hardened gates predict for the extracted model.
    macs_predicted: int
    #: Heads and FFN neurons kept, in all, and the blocks whose FFN closed.
    heads: int
    neurons: int
    ffn_closed: list[int]
    #: Per block what the hardened gates keep (:func:`~vitprune.methods.hiap.search.layer_summary`).
    layers: list[dict[str, Any]]
    #: HiAP's settings and the training's; ``top1`` holds ``dense``, ``extracted`` and ``gated_last_epoch`` (the
    #: hardened gates, before extraction).
    config: dict[str, Any]
    train: dict[str, Any]
    #: Every training epoch's statistics, without the per-block view.
    history: list[dict[str, Any]]
    plot: str


@method_run
def run_hiap(model: nn.Module, data: MethodData, config: HiAPRun, ctx: RunContext) -> HiAPReport:
    """HiAP on a copy of ``model``: train it with its gates on ``data.train`` for ``config.train``'s epochs, extract
    it; returns the report.

    With ``config.config.target_macs`` the controller steers λ towards the budget and the extraction's
    hardening threshold is the one nearest the paper's 0 that lands within ``config.config.budget_tolerance``
    below the target (:func:`~vitprune.methods.hiap.search.budget_threshold`). ``ctx.resume``
    continues the training run in ``ctx.run_dir``; without it a run directory holding a run is an error.
    Under torchrun (every process calls it with the same arguments) the training is data-parallel,
    every process extracts the same model from the same gates, and rank 0 alone writes the run directory
    (and reads its history) and times the model; every process returns the same report.
    """
    train, settings = config.train, config.config
    get_adapter(model, needs=REQUIRES, by="HiAP")
    settings.validate()
    ctx.speed.validate()
    train.validate()
    fixed = fixed_macs(model, settings.target_macs)
    wanted = None if settings.target_macs is None else settings.target_macs.resolve(model)
    run_dir, device, stages = open_run(model, ctx, seed=train.seed)
    val_loader = build_loader(data.val, 256, shuffle=False, seed=0)
    top1 = {"dense": stages.run("evaluate the dense model", lambda: evaluate(model, val_loader)["top1"])}

    work = copy.deepcopy(model)
    gates, _ = stages.run("train weights and gates", lambda: train_gates(
        work, data.train, settings, train, val_set=data.val, teacher=model, run_dir=run_dir / SEARCH_DIR,
        device=device, resume=ctx.resume, progress=ctx.progress, on_epoch=ctx.on_epoch, dist=ctx.dist))
    on_main(lambda: _save_gates(gates, run_dir / GATES_FILE))
    dense_macs = count_macs(model)
    threshold = 0.0
    if wanted is not None:
        threshold = budget_threshold(gates, fixed, wanted, settings.budget_tolerance, above=settings.above)
    layers = layer_summary(gates, threshold)
    predicted = hardened_macs(gates, fixed, threshold)
    stages.run("extract the pruned model", lambda: extract(work, gates, threshold))
    top1["extracted"] = evaluate(work, val_loader)["top1"]
    history = on_main(lambda: logged_epochs(run_dir / SEARCH_DIR))
    if history and "val_top1" in history[-1]:  # the hardened gates on the unextracted model
        top1["gated_last_epoch"] = history[-1]["val_top1"]
    summary = {"target_macs": wanted, "threshold": threshold, "macs_predicted": predicted,
               "heads": sum(layer["heads"] for layer in layers), "neurons": sum(layer["neurons"] for layer in layers),
               "ffn_closed": [b for b, layer in enumerate(layers) if not layer["ffn"]]}
    on_main(lambda: plot_architecture(layers, run_dir / PLOT_FILE, title=f"HiAP: {count_macs(work).macs / 1e6:.2f} "
                                      f"M MACs (dense {dense_macs.macs / 1e6:.2f} M)"))
    return finish_run(HiAPReport, work, model, ctx, stages=stages, device=device, top1=top1,
                      metadata={"hiap": summary}, **summary, layers=layers, config=settings.to_dict(),
                      train=asdict(train), history=[{k: v for k, v in h.items() if k != "layers"} for h in history],
                      plot=str(run_dir / PLOT_FILE))


def _save_gates(gates: HiAPGates, path: Path) -> None:
    tensors = {name: param.detach().cpu().contiguous() for name, param in gates.named_parameters()}
    with atomic_file(path) as tmp:
        save_file(tensors, str(tmp))
