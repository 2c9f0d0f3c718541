"""Every command that builds or samples anything takes --seed, and the same command builds the same model: random
(--no-pretrained) weights are drawn under the seed, whatever ran before in the process."""

from __future__ import annotations

import pytest
import torch
import typer
from test_cli import run

from vitprune.cli import app
from vitprune.methods.hetdpt.pipeline import configure
from vitprune.models import resolve_model
from vitprune.runs.steps import ChainConfig, Step

#: The commands that build a model or sample data.
SEEDED = [("finetune",), ("chain",), ("prune", "depth"), ("prune", "width"), ("prune", "hetdpt"),
          ("prune", "hetdpt+"), ("prune", "vbp"), ("prune", "star"), ("prune", "hiap")]


@pytest.mark.parametrize("path", SEEDED, ids=" ".join)
def test_the_command_takes_a_seed(path):
    command = typer.main.get_command(app)
    for word in path:
        command = command.commands[word]
    assert any("--seed" in param.opts for param in command.params)


def test_random_weights_follow_the_seed_not_the_global_generator():
    torch.manual_seed(123)
    first = resolve_model("deit_tiny_patch16_224", pretrained=False).state_dict()
    state = torch.get_rng_state()
    again = resolve_model("deit_tiny_patch16_224", pretrained=False).state_dict()
    assert torch.equal(torch.get_rng_state(), state)  # the caller's generator is left where it was
    other = resolve_model("deit_tiny_patch16_224", pretrained=False, seed=1).state_dict()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["blocks.0.attn.qkv.weight"], other["blocks.0.attn.qkv.weight"])


def test_two_identical_runs_save_identical_models(capsys, tmp_path):
    for name in ("a", "b"):
        code, _, err = run(capsys, "prune", "depth", "digits-vit", "--no-pretrained", "--attention", "0",
                           "--no-speed", "--json", "--out", str(tmp_path / name))
        assert code == 0, err
    code, _, err = run(capsys, "prune", "depth", "digits-vit", "--no-pretrained", "--attention", "0",
                       "--seed", "1", "--no-speed", "--json", "--out", str(tmp_path / "c"))
    assert code == 0, err
    weights = [(tmp_path / name / "model.safetensors").read_bytes() for name in "abc"]
    assert weights[0] == weights[1] != weights[2]


def test_a_chain_seed_is_every_step_s_unless_it_names_its_own():
    steps = [Step("depth", {"attention": [0]}), Step("vbp", {"ratio": 0.3}), Step("finetune", {"seed": 7}),
             Step("hetdpt", {"budget": 2})]
    assert [s.settings.get("seed") for s in ChainConfig(steps, seed=3).seeded_steps()] == [None, 3, 7, 3]
    assert ChainConfig(steps).seeded_steps() == steps


def test_hetdpt_s_seed_reaches_every_stage():
    config = configure("digits", seed=5)
    assert config.probe.seed == config.search.seed == config.finetune.seed == 5
    assert configure("digits").finetune.seed == 0
