"""HiAP as a registered method: ``vitprune prune hiap``, the chain's ``hiap`` step and a ``vitprune compare`` arm."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from vitprune.errors import VitpruneError
from vitprune.measure.target import MacTarget
from vitprune.methods.hiap.config import PRESET, REQUIRES, TRAIN_DEFAULTS, HiAPConfig, HiAPRun
from vitprune.runs.method import (
    ChainStep, CommandLine, Method, Model, TargetSearch, build_config, build_train_config, get_method, split_settings,
)
from vitprune.training.config import TrainConfig
from vitprune.training.presets import get_preset


class HiAP(Method, CommandLine, ChainStep, TargetSearch):
    name = "hiap"
    title = "HiAP"
    config = HiAPRun
    data = ("train", "val")
    help = ("HiAP: learn which heads, value dims, FFN blocks and neurons to keep under a MAC penalty; extract the "
            "model (the paper trains 200 epochs: --preset imagenet-hiap).")
    options = HiAPConfig
    #: Without --preset: HiAP's schedule (the paper's lr and batch without its augmentation), for --epochs.
    recipe = TrainConfig(epochs=1, **TRAIN_DEFAULTS)
    renderer = "vitprune.methods.hiap.render:render_hiap"
    epoch_renderer = "vitprune.methods.hiap.render:render_hiap_epoch"
    summary = ("heads", "neurons", "ffn_closed", "threshold")
    settings = "TrainConfig's fields (epochs required) and HiAPConfig's (target_macs, ...)"

    def requires(self, config: HiAPRun) -> tuple[str, ...]:
        return REQUIRES

    def from_command(self, options: HiAPConfig, training: TrainConfig | None) -> HiAPRun:
        if training is None:
            raise VitpruneError("give --epochs, or --preset for a paper's recipe (HiAP's: --preset imagenet-hiap): "
                                "HiAP trains its gates with its weights")
        return HiAPRun(training, options)

    def configure(self, settings: dict[str, Any], preset: str) -> HiAPRun:
        train_settings, rest = split_settings(settings, {f.name for f in fields(TrainConfig)})
        run = HiAPRun(build_train_config(train_settings, self.name, defaults=TRAIN_DEFAULTS),
                      build_config(HiAPConfig, rest, self.name))
        run.validate()
        return run

    def search_cost(self, model: Model, step: dict[str, Any], images: int, val_images: int
                    ) -> tuple[float, float]:
        # its gate training, each image also through the teacher
        seen = float(step["epochs"] * images)
        return seen, seen

    def target_steps(self, model: Model, target: MacTarget, effort: str, *, exact: bool = True
                     ) -> list[dict[str, Any]]:
        """HiAP's gate training (its search: as long as the recovery at quick and standard effort, the paper's own at
        paper) and extraction, then, with ``exact``, VBP's neuron trim to the target: the extraction stops at the
        smallest model above it (one gate can close a whole FFN block)."""
        epochs = {"quick": 1, "standard": 10, "paper": get_preset(PRESET).train.epochs}[effort]
        hiap = {"method": self.name, "target_macs": target.to_json(), "epochs": epochs}
        if not exact:
            return [hiap]
        return [{**hiap, "above": True}, *get_method("vbp").target_steps(model, target, effort)]
