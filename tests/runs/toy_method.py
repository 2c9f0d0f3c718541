"""A method registered from outside vitprune: random FFN-neuron pruning, as a user's package would add one.

It touches the model only through vitprune's public parts (the adapter's block views, a registered surgery edit,
the run's shared start ``open_run`` and tail ``finish_run``), and reaches the command line and chains by registering
itself: nothing in ``cli/`` or ``runs/`` names it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

import vitprune
from vitprune.config import setting
from vitprune.data import build_loader
from vitprune.runs import ChainStep, CommandLine, Method, MethodData, RunContext, method_run, register_method
from vitprune.runs.report import RunReport
from vitprune.runs.stages import finish_run, open_run
from vitprune.surgery import prune_mlp_neurons
from vitprune.training import evaluate

NAME = "random-neurons"


@dataclass
class RandomNeuronsConfig:
    ratio: float = setting(0.3, min=0, max=0.9, help="Share of each MLP's hidden neurons removed, drawn at random.")
    seed: int = setting(0, help="Seed of the draw and of a --no-pretrained model's weights.")


@dataclass
class RandomNeuronsReport(RunReport):
    removed: dict[str, list[int]]


def random_removal(model: torch.nn.Module, config: RandomNeuronsConfig) -> dict[int, list[int]]:
    """Per block, the hidden neurons the draw removes."""
    generator = torch.Generator().manual_seed(config.seed)
    removed = {}
    for view in vitprune.get_adapter(model).blocks():
        width = view.mlp.hidden_features
        removed[view.index] = sorted(torch.randperm(width, generator=generator)[: int(config.ratio * width)].tolist())
    return removed


@method_run
def run_random_neurons(model: torch.nn.Module, data: MethodData, config: RandomNeuronsConfig,
                       ctx: RunContext) -> RandomNeuronsReport:
    """The toy method's entry point: remove the drawn neurons of a copy of ``model``, report and save it."""
    run_dir, device, stages = open_run(model, ctx, seed=config.seed)
    val = build_loader(data.val, 64, shuffle=False, seed=0)
    pruned = copy.deepcopy(model)
    removed = random_removal(model, config)
    for block, gone in removed.items():
        width = vitprune.get_adapter(pruned).block(block).mlp.hidden_features
        prune_mlp_neurons(pruned, block, [i for i in range(width) if i not in set(gone)])
    top1 = {"dense": evaluate(model, val)["top1"], "pruned": evaluate(pruned, val)["top1"]}
    gone = {str(b): blocks for b, blocks in removed.items()}
    return finish_run(RandomNeuronsReport, pruned, model, ctx, stages=stages, device=device, top1=top1,
                      metadata={NAME: gone}, removed=gone)


class RandomNeurons(Method, CommandLine, ChainStep):
    name = NAME
    title = "random neuron pruning"
    config = RandomNeuronsConfig
    entry = f"{__name__}:run_random_neurons"
    data = ("val",)
    help = "Random FFN-neuron pruning (a toy method registered by the tests)."
    summary = ("removed",)

    def requires(self, config: RandomNeuronsConfig) -> tuple[str, ...]:
        return ("ffn_width",)


def register() -> RandomNeurons:
    return register_method(RandomNeurons())
