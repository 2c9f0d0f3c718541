"""HiAP's settings, without torch: the command line builds its options from them (:mod:`vitprune.lazy`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vitprune.config import JsonRecord, setting
from vitprune.errors import check_settings
from vitprune.measure.target import SPELLING, MacTarget
from vitprune.training.config import TrainConfig
from vitprune.training.presets import get_preset

#: The cost models' names (:mod:`~vitprune.methods.hiap.cost`): Eq. 5's constants, or what extraction realises.
COST_MODELS = ("paper", "exact")

#: The paper's training recipe on ImageNet (:mod:`vitprune.training.presets`).
PRESET = "imagenet-hiap"
#: HiAP's training settings besides the epochs, by default: the paper's schedule of :data:`PRESET` (AdamW at 5e-5,
#: batch 256, no warm-up) without its augmentation; ``vitprune prune hiap`` and a chain's ``hiap`` step take
#: theirs from here.
TRAIN_DEFAULTS: dict[str, Any] = {key: getattr(get_preset(PRESET).train, key)
                                  for key in ("lr", "batch_size", "warmup_epochs")}


#: How far below its MAC target an extracted model may land (:func:`~vitprune.methods.hiap.search.budget_threshold`).
BUDGET_TOLERANCE = 0.02


#: What HiAP needs of every model's family (:data:`vitprune.adapters.CAPABILITIES`); it gates heads where the family
#: has attention, and their value dimensions where it can give heads their own widths (``layer_shapes``).
REQUIRES = ("gates", "ffn_width")


@dataclass
class HiAPConfig(JsonRecord):
    """HiAP's settings besides the training recipe; defaults are the paper's where it gives them (note §2)."""

    #: Penalty weights (paper's best DeiT-S ratio 2:1); with ``target_macs`` they set the macro:micro ratio
    #: and the controller's starting point.
    lambda_macro: float = setting(0.9, help="Weight of the expected head cost (paper: 0.9).")
    lambda_micro: float = setting(0.45, help="Weight of the expected value-dim and neuron cost (paper: 0.45).")
    #: Total MACs per image (full convention) to reach; ``None``: the paper's fixed-λ penalty.
    target_macs: MacTarget | None = setting(None, parse=MacTarget.parse, aliases=("--macs",),
                                            alias_parse=MacTarget.from_gmacs,
                                            help=f"MACs per image to reach (full convention): {SPELLING}; a "
                                                 "controller steers the λ (an extension).")
    #: Dual-ascent step of the λ scale per optimisation step, per unit of cost-share error.
    controller_rate: float = 0.05
    cost_model: str = setting("paper", choices=COST_MODELS,
                              help="paper (Eq. 5's constants) or exact (what extraction realises).")
    hard: bool = setting(True, flag="--hard/--soft", help="Straight-through hard gates (the note's reading) or soft "
                                                          "Gumbel-sigmoid ones in the forward pass.")
    gate_init: float = 3.0
    #: ``None``: ``10·max(1, |gate_init|)`` over the run's optimisation steps, so Adam (moving a parameter about
    #: ``lr`` per step) can carry a logit across zero several times (note §2.2).
    gate_lr: float | None = setting(None, help="Gate-logit learning rate (default: 10·|gate init| over the run's "
                                               "steps).")
    tau_start: float = 2.0
    tau_end: float = 0.5
    #: Feasibility (paper Eq. 8 and its siblings): minimum expected heads per layer, value-dim share per
    #: open head, neuron share per open FFN, and the three penalty weights.
    min_heads: float = 1.0
    min_dims: float = 0.25
    min_neurons: float = 0.1
    beta_head: float = 5.0
    beta_dim: float = 5.0
    beta_ffn: float = 5.0
    #: KD from the dense teacher: ``(1 − α)·CE + α·T²·KL`` (batch-mean), α_KD 0.7 and T 4 as the paper.
    kd_alpha: float = 0.7
    kd_tau: float = 4.0
    #: With a MAC target, how far below it the extracted model may land (the hardening threshold nearest the paper's
    #: 0 within it).
    budget_tolerance: float = BUDGET_TOLERANCE
    #: With a MAC target: extract the smallest model that still costs more than it (the highest threshold above it),
    #: for a neuron trim (a chain's next ``vbp`` step) to reach it exactly: one gate (a whole FFN block, a head) can
    #: jump past the tolerance band.
    above: bool = False

    def __post_init__(self) -> None:
        self.target_macs = MacTarget.coerce(self.target_macs)

    def validate(self) -> None:
        """Raise a one-line error for settings that cannot run."""
        check_settings([
            (self.cost_model in COST_MODELS, f"unknown cost model {self.cost_model!r} "
                                             f"(choose from: {', '.join(COST_MODELS)})"),
            (self.lambda_macro >= 0 and self.lambda_micro >= 0, "the penalty weights λ must be >= 0"),
            (self.target_macs is None or self.lambda_macro + self.lambda_micro > 0,
             "a MAC target needs a positive λ_macro or λ_micro to set the macro:micro ratio"),
            (self.controller_rate > 0, "the controller rate must be positive"),
            (self.gate_lr is None or self.gate_lr > 0, "the gate learning rate must be positive"),
            (0 < self.tau_end <= self.tau_start, "temperatures need 0 < tau_end <= tau_start"),
            (min(self.min_heads, self.min_dims, self.min_neurons) >= 0, "minimum retentions must be >= 0"),
            (min(self.beta_head, self.beta_dim, self.beta_ffn) >= 0, "feasibility weights must be >= 0"),
            (0 <= self.kd_alpha <= 1 and self.kd_tau > 0, "KD needs 0 <= kd_alpha <= 1 and kd_tau > 0"),
            (0 <= self.budget_tolerance < 1, "the budget tolerance must be in [0, 1)"),
            (not self.above or self.target_macs is not None, "above (stop short of the MAC target) needs target_macs"),
        ])


@dataclass
class HiAPRun:
    """Everything a HiAP run needs: its training (weights and gates together) and HiAP's own settings."""

    train: TrainConfig
    config: HiAPConfig = field(default_factory=HiAPConfig)

    def validate(self) -> None:
        self.train.validate()
        self.config.validate()


__all__ = ["BUDGET_TOLERANCE", "REQUIRES", "COST_MODELS", "PRESET", "TRAIN_DEFAULTS", "HiAPConfig", "HiAPRun"]
