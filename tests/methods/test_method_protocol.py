"""A method is one folder that registers itself: a toy method registered from the tests directory gets a working
``vitprune prune`` command, a chain step, a report and a reload, with no line of ``cli/`` or ``methods/chain.py``
naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import toy_method
import torch

import vitprune
from vitprune.cli import main
from vitprune.cli.methods import prune_app
from vitprune.data import build_dataset
from vitprune.measure import SpeedConfig, count_macs
from vitprune.methods.base import get_method, methods, unregister_method
from vitprune.methods.chain import parse_chain, run_chain, step_methods
from vitprune.models import create_model, resolve_model
from vitprune.surgery import prune_mlp_neurons

SRC = Path(vitprune.__file__).parent


@pytest.fixture
def toy():
    method = toy_method.register()
    yield method
    unregister_method(toy_method.NAME)
    prune_app.registered_commands[:] = [c for c in prune_app.registered_commands if c.name != toy_method.NAME]


def _cli(capsys, *argv: str) -> tuple[str, str]:
    """``vitprune ARGV`` in-process, as the entry point runs it (the registry read again): its stdout and stderr. A
    failing command exits, which fails the test."""
    main(list(argv))
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_nothing_in_the_cli_or_the_chain_names_the_toy_method():
    for path in [*(SRC / "cli").glob("*.py"), SRC / "methods" / "chain.py"]:
        assert toy_method.NAME not in path.read_text(), path


def test_the_toy_method_gets_a_command_that_runs_reports_and_reloads(toy, capsys, tmp_path):
    assert toy_method.NAME in _cli(capsys, "prune", "--help")[0]
    out, _ = _cli(capsys, "prune", toy_method.NAME, "--help")
    assert "--ratio" in out and "--data" in out and "--resume" in out and "--speed-batch" in out
    run_dir = tmp_path / "run"
    out, _ = _cli(capsys, "prune", toy_method.NAME, "digits-vit", "--no-pretrained", "--seed", "3", "--data", "digits",
                  "--ratio", "0.5", "--out", str(run_dir), "--no-speed", "--json")
    report = json.loads(out)
    assert report["model"] == "digits-vit" and report["speed"] is None
    assert json.loads((run_dir / "report.json").read_text())["removed"] == report["removed"]
    # The command drew the model and the neurons under --seed 3: the same edit by hand gives the same model.
    dense = resolve_model("digits-vit", pretrained=False, seed=3)
    removed = toy_method.random_removal(dense, toy_method.RandomNeuronsConfig(ratio=0.5, seed=3))
    assert report["removed"] == {str(b): gone for b, gone in removed.items()}
    loaded = vitprune.load(report["model_dir"])
    assert count_macs(loaded).totals() == report["pruned"] and report["pruned"]["params"] < report["dense"]["params"]
    x = torch.randn(2, *vitprune.get_adapter(dense).input_size)
    reference = dense
    for block, gone in removed.items():
        width = vitprune.get_adapter(reference).block(block).mlp.hidden_features
        prune_mlp_neurons(reference, block, [i for i in range(width) if i not in set(gone)])
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), reference.eval()(x))
    # The printed report, from the method's common fields.
    out, _ = _cli(capsys, "prune", toy_method.NAME, "digits-vit", "--no-pretrained", "--data", "digits", "--out",
                  str(tmp_path / "printed"), "--no-speed")
    assert "random-neurons-pruned" in out and "top-1" in out and "speed not measured" in out


def test_the_toy_method_is_a_chain_step(toy, tmp_path):
    assert toy_method.NAME in methods() and toy_method.NAME in step_methods()
    steps = parse_chain([{"method": toy_method.NAME, "ratio": 0.25}, {"method": "depth", "attention": [0]}])
    model = create_model("digits-vit", depth=2)
    sets = [build_dataset("digits", split, input_size=vitprune.get_adapter(model).input_size,
                          is_training=False) for split in ("train", "val")]
    report = run_chain(model, *sets, steps, run_dir=tmp_path / "chain", speed=SpeedConfig(enabled=False),
                       onnx=False)
    assert [record["method"] for record in report.steps] == ["start", toy_method.NAME, "depth"]
    assert set(report.steps[1]["summary"]) == {"removed"}
    final = vitprune.load(report.model_dir)
    assert [e.op for e in vitprune.get_recipe(final).edits][-1] == "remove_attention"
    assert count_macs(final).params == report.steps[-1]["params"] < report.steps[0]["params"]


def test_a_bad_setting_of_the_toy_step_is_one_line_naming_it(toy):
    with pytest.raises(vitprune.VitpruneError, match="random-neurons step: unknown setting"):
        parse_chain([{"method": toy_method.NAME, "rate": 0.3}])
    assert get_method(toy_method.NAME).requires(toy_method.RandomNeuronsConfig()) == ("ffn_width",)
