"""A method is one folder that registers itself: a toy method registered from the tests directory gets a working
``vitprune prune`` command, a chain step, a report and a reload, with no line of ``cli/`` or ``runs/chain.py``
naming it."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import toy_method
import torch

import vitprune
from vitprune.cli import main
from vitprune.cli.methods import prune_app
from vitprune.data import build_dataset
from vitprune.measure import SpeedConfig, count_macs
from vitprune.models import create_model, resolve_model
from vitprune.runs import MethodData, RunContext
from vitprune.runs.chain import run_chain
from vitprune.runs.method import get_method, methods, step_methods, unregister_method
from vitprune.runs.steps import parse_chain
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
    for path in [*(SRC / "cli").glob("*.py"), *(SRC / "runs").glob("*.py")]:
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
    chain = parse_chain([{"method": toy_method.NAME, "ratio": 0.25}, {"method": "depth", "attention": [0]}],
                        onnx=False)
    model = create_model("digits-vit", depth=2)
    sets = [build_dataset("digits", split, input_size=vitprune.get_adapter(model).input_size,
                          is_training=False) for split in ("train", "val")]
    report = run_chain(model, MethodData(*sets), chain,
                       RunContext(tmp_path / "chain", speed=SpeedConfig(enabled=False)))
    assert [record["method"] for record in report.steps] == ["start", toy_method.NAME, "depth"]
    assert set(report.steps[1]["summary"]) == {"removed"}
    final = vitprune.load(report.model_dir)
    assert [e.op for e in vitprune.get_recipe(final).edits][-1] == "remove_attention"
    assert count_macs(final).params == report.steps[-1]["params"] < report.steps[0]["params"]


def test_a_bad_setting_of_the_toy_step_is_one_line_naming_it(toy):
    with pytest.raises(vitprune.VitpruneError, match="random-neurons step: unknown setting"):
        parse_chain([{"method": toy_method.NAME, "rate": 0.3}])
    assert get_method(toy_method.NAME).requires(toy_method.RandomNeuronsConfig()) == ("ffn_width",)


def _entry_functions() -> dict[str, object]:
    """Every registered method's entry point, and those of a chain and a comparison."""
    from vitprune.comparison.run import compare

    return {**{name: method.entry_point() for name, method in methods().items()}, "chain": run_chain,
            "compare": compare}


@pytest.mark.parametrize("name", sorted(_entry_functions()))
def test_every_method_runs_through_one_entry_point_of_one_shape(name):
    """``run(model, data: MethodData, config, ctx: RunContext) -> Report``, marked as a method's entry point (it claims
    ``ctx.run_dir``); a method's ``run`` is that function, not a translation of its own."""
    from vitprune.runs.context import ENTRY_PARAMETERS
    from vitprune.runs.method import Method

    entry = _entry_functions()[name]
    assert getattr(entry, "method_run", False) is True
    signature = inspect.signature(entry)
    assert tuple(signature.parameters) == ENTRY_PARAMETERS == ("model", "data", "config", "ctx")
    annotations = {p.name: p.annotation for p in signature.parameters.values()}
    assert (annotations["data"], annotations["ctx"]) == ("MethodData", "RunContext")
    if name in methods():
        assert type(methods()[name]).run is Method.run


def test_an_entry_point_of_another_shape_is_refused_where_it_is_defined():
    from vitprune.runs.context import method_run

    with pytest.raises(TypeError, match="a method's entry point takes \\(model, data, config, ctx\\)"):
        @method_run
        def run_by_keywords(model, train_set, val_set, *, run_dir):
            pass


def test_every_command_method_has_exactly_one_command():
    """Generated from the registry, but for the methods whose command is written by hand (HetDPT's, whose options
    change a preset), which have theirs and no second one."""
    from vitprune.cli.methods import command_methods

    commands = [info.name or info.callback.__name__ for info in prune_app.registered_commands]
    assert sorted(commands) == sorted(command_methods())
    assert {name for name, method in command_methods().items() if method.handwritten} == {"hetdpt", "hetdpt+"}


#: A package another project ships: one module holding a method, and its distribution's entry point (plus one that
#: cannot be loaded).
THIRD_PARTY = "vitprune_toy"


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """``vitprune_toy`` installed into a site of its own (a module and a ``.dist-info`` with its entry points), on the
    import path: what ``pip install vitprune-toy`` leaves."""
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{THIRD_PARTY}.py").write_text(Path(toy_method.__file__).read_text())
    info = site / f"{THIRD_PARTY}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vitprune-toy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[vitprune.methods]\n{toy_method.NAME} = {THIRD_PARTY}:RandomNeurons\n"
                                           f"broken = {THIRD_PARTY}:NoSuchMethod\n")
    monkeypatch.syspath_prepend(str(site))
    yield site
    unregister_method(toy_method.NAME)
    prune_app.registered_commands[:] = [c for c in prune_app.registered_commands if c.name != toy_method.NAME]
    sys.modules.pop(THIRD_PARTY, None)


@pytest.mark.slow  # an installed package's entry point (5 s); the toy method's command runs in the fast lane
def test_a_method_another_package_installs_gets_its_command_and_chain_step(installed, capsys, tmp_path):
    """Found through the entry-point group, as vitprune's own are: nothing registers it by hand. One that cannot be
    loaded is left out with a warning, and vitprune goes on."""
    with pytest.warns(vitprune.errors.VitpruneWarning, match="method 'broken' .* cannot be loaded and is left out"):
        found = methods()
    assert toy_method.NAME in found and type(found[toy_method.NAME]).__module__ == THIRD_PARTY
    assert "broken" not in found and list(found)[:len(vitprune_methods())] == vitprune_methods()
    assert toy_method.NAME in step_methods()
    out, _ = _cli(capsys, "prune", toy_method.NAME, "digits-vit", "--no-pretrained", "--data", "digits", "--ratio",
                  "0.5", "--out", str(tmp_path / "run"), "--no-speed", "--json")
    assert json.loads(out)["removed"] and vitprune.load(tmp_path / "run" / "model")
    chain = parse_chain([{"method": toy_method.NAME, "ratio": 0.25}, {"method": "depth", "attention": [0]}])
    assert [step.method for step in chain.steps] == [toy_method.NAME, "depth"]
    # A fresh process finds it too: the command line lists it.
    listed = subprocess.run([sys.executable, "-m", "vitprune", "prune", "--help"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(installed)}, check=True).stdout
    assert toy_method.NAME in listed


def vitprune_methods() -> list[str]:
    """vitprune's own methods, as its distribution declares them."""
    from importlib import metadata

    return [entry.name for entry in metadata.entry_points(group="vitprune.methods") if entry.dist.name == "vitprune"]
