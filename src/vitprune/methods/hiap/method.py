"""HiAP as a registered method: ``vitprune prune hiap`` and the chain's ``hiap`` step."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from vitprune.errors import VitpruneError
from vitprune.methods.base import (
    Method, MethodData, RunContext, build_config, build_train_config, register_method, split_settings,
)
from vitprune.methods.hiap.config import REQUIRES, TRAIN_DEFAULTS, HiAPConfig
from vitprune.training.config import TrainConfig

if TYPE_CHECKING:
    from torch import nn

    from vitprune.methods.hiap.pipeline import HiAPReport


@dataclass
class HiAPRun:
    """Everything a HiAP run needs: its training (weights and gates together) and HiAP's own settings."""

    train: TrainConfig
    config: HiAPConfig

    def validate(self) -> None:
        self.train.validate()
        self.config.validate()


class HiAP(Method):
    name = "hiap"
    title = "HiAP"
    help = ("HiAP: learn which heads, value dims, FFN blocks and neurons to keep under a MAC penalty; extract the "
            "model (the paper trains 200 epochs: --preset imagenet-hiap).")
    config = HiAPRun
    options = HiAPConfig
    #: Without --preset: HiAP's schedule (the paper's lr and batch without its augmentation), for --epochs.
    recipe = TrainConfig(epochs=1, **TRAIN_DEFAULTS)
    data = ("train", "val")
    summary = ("heads", "neurons", "ffn_closed", "threshold")
    settings = "TrainConfig's fields (epochs required) and HiAPConfig's (target_macs, ...)"

    def configure(self, settings: dict[str, Any], preset: str) -> HiAPRun:
        train_settings, rest = split_settings(settings, {f.name for f in fields(TrainConfig)})
        run = HiAPRun(build_train_config(train_settings, self.name, defaults=TRAIN_DEFAULTS),
                      build_config(HiAPConfig, rest, self.name))
        run.validate()
        return run

    def from_command(self, options: HiAPConfig, training: TrainConfig | None) -> HiAPRun:
        if training is None:
            raise VitpruneError("give --epochs, or --preset for a paper's recipe (HiAP's: --preset imagenet-hiap): "
                                "HiAP trains its gates with its weights")
        return HiAPRun(training, options)

    compare_skip = None

    def arm_steps(self, model: nn.Module, macs: float, effort: str, recovery: dict[str, Any]) -> list[dict[str, Any]]:
        # HiAP trains its weights with its gates: the recovery's training is its run (with its own distillation), and
        # nothing follows the extraction.
        train = {k: v for k, v in recovery.items() if k in {f.name for f in fields(TrainConfig)}}
        return [{"method": self.name, "target_macs": macs, **train}]

    def requires(self, config: HiAPRun) -> tuple[str, ...]:
        return REQUIRES

    def run(self, model: nn.Module, data: MethodData, config: HiAPRun, ctx: RunContext) -> HiAPReport:
        from vitprune.methods.hiap.pipeline import run_hiap

        return run_hiap(model, data.train, data.val, train=config.train, config=config.config,
                        on_epoch=ctx.on_epoch, **ctx.pipeline_options())


register_method(HiAP())
