"""HiAP's single-phase training (paper Eq. 7, Alg. in note §1.8): weights and gate logits learn together.

Each forward in training mode draws one Gumbel-sigmoid sample per gate (shared by the batch) from a
generator seeded by the step, so every torchrun process draws the same architecture and a resumed
run draws what the uninterrupted one would; in eval mode the gates are the hardened ``1[α > 0]``,
so the validation accuracy logged each epoch is that of the model extraction will cut out.

The loss is the engine's criterion (cross-entropy + KD from the dense teacher) plus the expected
cost penalty ``λ_macro·L_macro + λ_micro·L_micro`` and the feasibility penalties. The gate logits
ride on the model as the ``hiap_gates`` submodule while training, so DDP averages their gradients
and the checkpoints hold them, and train in their own optimizer group (``gate_lr``, no decay).

Budget targeting (an extension, note §1.7): with ``target_macs`` the two λ are scaled by a factor
that dual ascent steers each step, up while the model costs more than the target and down (to
zero) while it costs less. "Costs" is the larger of the expected and the hardened exact cost, so
the architecture extraction will give, not only its expectation, is held to the budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from vitprune.errors import UnreachableTargetError, VitpruneError
from vitprune.measure import count_macs, format_count
from vitprune.measure.target import MacTarget, first, goal
from vitprune.methods.hiap.config import BUDGET_TOLERANCE, COST_MODELS, HiAPConfig
from vitprune.methods.hiap.cost import cost_penalty, dense_cost, feasibility, gate_cost, layer_shapes
from vitprune.methods.hiap.gated import GatedForward
from vitprune.methods.hiap.gates import HiAPGates, temperature
from vitprune.training import TrainConfig, Trainer, TrainHooks, weight_decay_groups
from vitprune.training.distill import DistillationLoss, make_teacher, use_distillation_head
from vitprune.training.distributed import DistContext
from vitprune.training.progress import training_progress

#: Name of the gate module on the model while it trains.
GATES_ATTR = "hiap_gates"


def fixed_macs(model: nn.Module, target: MacTarget | None = None) -> int:
    """MACs per image HiAP cannot prune (patch embedding, norms, head): the dense total less the prunable cost.

    With ``target``, first the one-line errors of a target out of reach (:func:`~vitprune.measure.target.goal`): at
    or above the dense model's MACs, or at most what HiAP cannot prune (the nearest it reaches).
    """
    total = count_macs(model).macs
    fixed = total - dense_cost(layer_shapes(model))
    if target is not None:
        wanted, _ = goal(target.in_convention("full"), model, total)
        if wanted <= fixed:
            raise UnreachableTargetError(f"HiAP cannot reach {format_count(wanted)} MACs per image (full convention); "
                                         f"the nearest it reaches is above what it cannot prune, "
                                         f"{format_count(fixed)} (embedding, norms, head)")
    return fixed


def layer_summary(gates: HiAPGates, threshold: float = 0.0) -> list[dict[str, Any]]:
    """Per block: hardened heads, value dims per open head, FFN open, neurons kept, and their expectations."""
    probabilities, hard = gates.probabilities(), gates.hardened(threshold)
    rows = []
    for layer, shape in enumerate(gates.shapes):
        p_head, p_dim = probabilities["head"][layer].detach(), probabilities["dim"][layer].detach()
        p_block, p_neuron = probabilities["block"][layer].detach(), probabilities["neuron"][layer].detach()
        head, dim = hard["head"][layer] > 0, hard["dim"][layer] > 0
        block = bool(hard["block"][layer])
        rows.append({
            "heads": int((head & dim.any(dim=1)).sum()), "heads_of": shape.heads,
            "value_dims": [int(dim[h].sum()) for h in range(shape.heads) if head[h] and dim[h].any()],
            "head_dim": shape.head_dim, "ffn": block,
            "neurons": int((hard["neuron"][layer] > 0).sum()) if block else 0, "neurons_of": shape.hidden,
            "expected_heads": float(p_head.sum()), "expected_dims": float((p_head[:, None] * p_dim).sum()),
            "expected_neurons": float(p_block * p_neuron.sum()),
        })
    return rows


def hardened_macs(gates: HiAPGates, fixed: int, threshold: float = 0.0) -> int:
    """Total MACs per image of the model extraction cuts at ``threshold`` (the exact cost model)."""
    return fixed + round(float(sum(gate_cost(gates.hardened(threshold), gates.shapes, "exact"))))


def costs(gates: HiAPGates, fixed: int) -> dict[str, float]:
    """Expected (both cost models) and hardened (exact: the extracted model's) total MACs per image."""
    probabilities = {k: [p.detach() for p in v] for k, v in gates.probabilities().items()}
    out = {f"expected_{m}": fixed + float(sum(gate_cost(probabilities, gates.shapes, m))) for m in COST_MODELS}
    out["hardened"] = hardened_macs(gates, fixed)
    return out


def budget_threshold(gates: HiAPGates, fixed: int, target_macs: float, tolerance: float = BUDGET_TOLERANCE, *,
                     above: bool = False) -> float:
    """The hardening threshold nearest the paper's 0 whose extracted model costs ``(1 − tolerance)·target`` to
    ``target`` MACs; if no threshold lands in that band, the one giving the largest model within the target. With
    ``above``, the highest threshold whose model still costs more than the target (a finer step reaches it).

    The cost of ``1[α > t]`` only falls as ``t`` rises, and changes only where ``t`` passes a logit, so
    the candidates are 0 and the midpoints between consecutive distinct logits (an extension for
    target mode, note §1.7: the controller brings the gates near the budget, this closes the gap
    that a few undecided gates flipping together can leave).
    """
    logits = torch.cat([a.detach().flatten() for name in ("head", "dim", "block", "neuron")
                        for a in gates.family(name)]).unique().sort().values
    candidates = sorted(torch.cat([torch.zeros(1), (logits[1:] + logits[:-1]) / 2, logits[:1] - 1]).tolist())

    def macs(i: float) -> int:
        return hardened_macs(gates, fixed, candidates[int(i)])

    last = len(candidates) - 1
    first_fit = first(lambda i: macs(i) <= target_macs, 0, last, integer=True)
    if first_fit is None:
        raise UnreachableTargetError(f"no hardening of the gates fits {format_count(target_macs)} MACs; the nearest "
                                     f"costs {format_count(macs(last))}")
    if above:  # the candidates start below every logit, where the model is dense and above the target
        return candidates[max(int(first_fit) - 1, 0)]
    below = first(lambda i: macs(i) < (1 - tolerance) * target_macs, 0, last, integer=True)
    last_in_band = last if below is None else int(below) - 1
    if last_in_band < first_fit:
        return candidates[int(first_fit)]
    return min(candidates[int(first_fit):last_in_band + 1], key=abs)


def undecided(gates: HiAPGates, low: float = 0.1, high: float = 0.9) -> float:
    """Share of all gates whose probability lies strictly between ``low`` and ``high``."""
    probs = torch.cat([p.detach().flatten() for ps in gates.probabilities().values() for p in ps])
    return float(((probs > low) & (probs < high)).float().mean())


class HiAPTraining(TrainHooks):
    """The engine hooks that sample and anneal the gates, add the penalties and steer λ."""

    def __init__(self, model: nn.Module, gates: HiAPGates, config: HiAPConfig, *, fixed_macs: int,
                 gate_lr: float | None = None, on_epoch: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.gates, self.config, self.fixed = gates, config, fixed_macs
        #: The MAC target resolved for the dense model (``None``: none).
        self.target = None if config.target_macs is None else config.target_macs.resolve(model)
        self.gated = GatedForward(model)
        self.dense = dense_cost(gates.shapes)
        self.share = None if self.target is None else (self.target - fixed_macs) / self.dense
        self.scale = 1.0
        #: The step whose start last moved the λ scale.
        self.steered = -1
        self.tau = config.tau_start
        self.on_epoch = on_epoch
        self.gate_lr = gate_lr or config.gate_lr
        self.last: dict[str, float] = {}
        self._generator: torch.Generator | None = None
        self._pre_hook = model.register_forward_pre_hook(self._set_gates)

    def _set_gates(self, module: nn.Module, _args: Any) -> None:
        if module.training:
            self.gated.set(self.gates.sample(self.tau, hard=self.config.hard, generator=self._generator))
        else:
            self.gated.set(self.gates.hardened())

    def remove(self) -> None:
        """Take every hook off the model."""
        self.gated.remove()
        self._pre_hook.remove()

    def param_groups(self, model: nn.Module, config: TrainConfig) -> list[dict]:
        return [*weight_decay_groups(model, config.weight_decay, exclude=self.gates.parameters()),
                {"params": list(self.gates.parameters()), "lr": self.gate_lr, "weight_decay": 0.0}]

    def on_step_start(self, trainer: Trainer) -> None:
        total = trainer.config.epochs * trainer.steps_per_epoch
        self.tau = temperature(trainer.step, total, start=self.config.tau_start, end=self.config.tau_end)
        device = next(self.gates.parameters()).device
        self._generator = torch.Generator(device=device).manual_seed(trainer.config.seed * 1_000_003 + trainer.step)
        # Once per step: a run resumed from a Ctrl-C inside a step starts that step again, its λ already moved.
        if self.share is not None and "hardened_share" in self.last and trainer.step != self.steered:
            current = max(self.last["expected_exact_share"], self.last["hardened_share"])
            self.scale = max(0.0, self.scale + self.config.controller_rate * (current - self.share))
        self.steered = trainer.step

    def extra_loss(self, trainer: Trainer, images: torch.Tensor, outputs: Any) -> torch.Tensor:
        cfg = self.config
        probabilities = self.gates.probabilities()
        penalty = cost_penalty(probabilities, self.gates.shapes, lambda_macro=self.scale * cfg.lambda_macro,
                               lambda_micro=self.scale * cfg.lambda_micro, cost_model=cfg.cost_model)
        feasible = feasibility(probabilities, min_heads=cfg.min_heads, min_dims=cfg.min_dims,
                               min_neurons=cfg.min_neurons)
        loss = penalty["loss"] + cfg.beta_head * feasible["head"] + cfg.beta_dim * feasible["dim"] \
            + cfg.beta_ffn * feasible["neuron"]
        cost = penalty["loss"].detach()
        self.last = {"penalty": float(cost), "feasibility": float(loss.detach() - cost)}
        if self.share is not None:  # the controller's signal, read at the next step's start
            expected = {k: [p.detach() for p in v] for k, v in probabilities.items()}
            self.last["expected_exact_share"] = self._exact_share(expected)
            self.last["hardened_share"] = self._exact_share(self.gates.hardened())
        return loss

    def _exact_share(self, values: dict[str, list[torch.Tensor]]) -> float:
        return float(sum(gate_cost(values, self.gates.shapes, "exact"))) / self.dense

    def on_epoch_end(self, trainer: Trainer, stats: dict[str, Any]) -> None:
        stats.update({"tau": self.tau, "lambda_scale": self.scale, "undecided": undecided(self.gates),
                      **{f"macs_{k}": v for k, v in costs(self.gates, self.fixed).items()},
                      **{k: self.last.get(k, math.nan) for k in ("penalty", "feasibility")}})
        stats["layers"] = layer_summary(self.gates)
        stats["target_macs"] = self.target
        if self.target is not None:  # what extraction would cut now: its threshold is not the paper's 0
            try:
                threshold = budget_threshold(self.gates, self.fixed, self.target, self.config.budget_tolerance)
                stats["macs_extracted"] = hardened_macs(self.gates, self.fixed, threshold)
            except VitpruneError:  # no hardening fits the target yet
                stats["macs_extracted"] = None
        if self.on_epoch is not None and trainer.dist.is_main:
            self.on_epoch(stats)

    def state_dict(self) -> dict[str, Any]:
        return {"scale": self.scale, "last": dict(self.last), "steered": self.steered}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scale, self.last, self.steered = state["scale"], dict(state["last"]), state["steered"]


def gate_learning_rate(gate_init: float, images: int, train: TrainConfig) -> float:
    """The default gate learning rate: ``10·max(1, |gate_init|)`` over the number of optimisation steps."""
    steps = train.epochs * math.ceil(math.ceil(images / train.batch_size) / train.accum_steps)
    return 10 * max(1.0, abs(gate_init)) / steps


def train_gates(model: nn.Module, train_set: Dataset, config: HiAPConfig, train: TrainConfig, *,
                val_set: Dataset | None = None, teacher: nn.Module | None = None, run_dir: str | Path | None = None,
                device: torch.device | str | None = None, resume: bool = False, progress: bool = False,
                on_epoch: Callable[[dict[str, Any]], None] | None = None,
                dist: DistContext | None = None) -> tuple[HiAPGates, list[dict]]:
    """Train ``model`` (in place) and its gates under the HiAP loss; returns the gates and the epoch history.

    ``teacher`` (default: a frozen copy of ``model`` as it is now) provides the KD targets. The model
    comes back ungated, with its trained weights; :func:`~vitprune.methods.hiap.extract` then cuts it.
    ``on_epoch`` receives each epoch's statistics with the per-layer :func:`layer_summary` (the live view), on
    rank 0 only. Under torchrun (``dist``, or the process group the :class:`~vitprune.training.Trainer` joins)
    the training is data-parallel.
    """
    config.validate()
    if train.ema_decay:
        raise VitpruneError("HiAP trains without EMA: an averaged copy would not follow the gates")
    fixed = fixed_macs(model, config.target_macs)
    teacher = make_teacher(teacher if teacher is not None else model)
    gates = HiAPGates(layer_shapes(model), init=config.gate_init)
    hooks = HiAPTraining(model, gates, config, fixed_macs=fixed, on_epoch=on_epoch,
                         gate_lr=config.gate_lr or gate_learning_rate(config.gate_init, len(train_set), train))
    model.add_module(GATES_ATTR, gates)
    use_distillation_head(model, "soft")
    criterion = DistillationLoss(train.label_loss(), teacher, kind="soft",
                                 alpha=config.kd_alpha, tau=config.kd_tau, per_image=True)
    try:
        trainer = Trainer(model, train_set, train, run_dir=run_dir, criterion=criterion, hooks=hooks, val_set=val_set,
                          device=device, dist=dist)
        criterion.teacher.to(trainer.device)
        trainer.start(resume=resume)
        with training_progress(trainer, enabled=progress and trainer.dist.is_main) as on_batch:
            history = trainer.fit(on_batch=on_batch)
    finally:
        hooks.remove()
        delattr(model, GATES_ATTR)
        use_distillation_head(model, "none")
    return gates, history
