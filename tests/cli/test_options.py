"""The options every command shares: each command has its groups, each group option has one definition (default,
help, flags) wherever it appears, and a chain step defaults as its command does."""

from __future__ import annotations

import dataclasses
from enum import Enum

import pytest
from test_help import command_tree

from vitprune.cli.options import CLASSES_GROUP, DATA_GROUP, MODEL_GROUP, SPEED_GROUP
from vitprune.measure import MacTarget, SpeedConfig
from vitprune.runs.steps import Step, check_chain


#: The leaf commands (groups have no options of their own).
COMMANDS = {path: command for path, command in command_tree().items() if not hasattr(command, "commands")}
PRUNE = {path for path in COMMANDS if path[0] == "prune"}
ANALYZE = {path for path in COMMANDS if path[0] == "analyze"}

#: Which commands take each group, and the options of it a command leaves out (with the reason in the README).
GROUPS = {
    "model": (MODEL_GROUP, {("eval",), ("finetune",), ("export",), ("chain",), ("compare",), ("bench",), *PRUNE,
                            *ANALYZE},
              {("export",): {"--device"},  # the export and its onnxruntime check run on the CPU
               ("bench",): {"--pretrained", "--checkpoint"}}),  # timing needs no weights: none are loaded
    "speed": (SPEED_GROUP, {("bench",), ("export",), ("demo",), ("chain",), ("compare",), *PRUNE},
              {("bench",): {"--speed"}}),  # bench is the measurement: there is nothing to switch off
    "data": (DATA_GROUP, {path for path, command in COMMANDS.items()
                          if any("--data" in param.opts for param in command.params)}, {}),
    # The command that trains a new head: the others read a head as it is (a new one would make every pruning
    # choice before it learned anything), and point at finetune.
    "classes": (CLASSES_GROUP, {("finetune",)}, {}),
}


def _options(command) -> dict[str, object]:
    """Each option of ``command`` under its first long name (``--speed`` for ``--speed/--no-speed``)."""
    return {param.opts[0]: param for param in command.params if param.opts and param.opts[0].startswith("--")}


def test_the_matrix_names_every_command():
    assert len(COMMANDS) >= 17 and ("prune", "hiap") in PRUNE and ("analyze", "recovery") in ANALYZE


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_every_command_has_exactly_its_groups(path):
    have = set(_options(COMMANDS[path]))
    for name, (group, commands, left_out) in GROUPS.items():
        expected = set(group) - left_out.get(path, set()) if path in commands else set()
        assert have & set(group) == expected, f"{' '.join(path)}: {name} group"


@pytest.mark.parametrize("option", [*MODEL_GROUP, *SPEED_GROUP, *DATA_GROUP, *CLASSES_GROUP])
def test_a_group_option_has_one_definition(option):
    forms = {(repr(p.default), p.help, tuple(p.secondary_opts))
             for command in COMMANDS.values() if (p := _options(command).get(option)) is not None}
    assert len(forms) == 1, forms


def test_speed_defaults_are_the_speed_config():
    speed = _options(COMMANDS[("chain",)])
    default = SpeedConfig()
    assert (speed["--speed"].default, speed["--speed-batch"].default, speed["--repeats"].default) == (
        default.enabled, default.batch_size, default.pairs)
    assert _options(COMMANDS[("eval",)])["--device"].default == "auto"


def _default(param) -> object:
    return param.default.value if isinstance(param.default, Enum) else param.default


def _step_defaults(method: str, required: dict) -> dict[str, object]:
    """What a chain step of ``method`` resolves its settings to when given only ``required``."""
    return _flat(check_chain([Step(method, required)], "digits")[0])


def _flat(config: object) -> dict[str, object]:
    """A config's fields, with those of the configs it holds (HiAP's training, a fine-tune's distillation)."""
    values: dict[str, object] = {}
    for key, value in vars(config).items():
        values |= _flat(value) if dataclasses.is_dataclass(value) else {key: value}
    return values


@pytest.mark.parametrize("method, command, required, not_in_chain", [
    ("finetune", ("finetune",), {"epochs": 1}, {"teacher"}),
    ("depth", ("prune", "depth"), {"attention": [0]}, {"activation"}),  # left out on the command line: []
    ("width", ("prune", "width"), {"ratio": 0.3}, set()),
    # The command's --lr, --batch-size, --seed and --workers change a recipe (HiAP's TRAIN_DEFAULTS, the step's too,
    # or --preset's).
    ("hiap", ("prune", "hiap"), {"epochs": 1}, {"lr", "batch_size", "seed", "workers"}),
    ("vbp", ("prune", "vbp"), {"ratio": 0.5}, {"lr", "batch_size", "distill", "alpha", "tau"}),  # its fine-tune
    ("star", ("prune", "star"), {"rho": 0.5}, {"lr", "batch_size", "distill", "rho"}),  # is a chain's own step
])
def test_a_chain_step_defaults_as_its_command(method, command, required, not_in_chain):
    step = _step_defaults(method, required)
    compared = 0
    for param in COMMANDS[command].params:
        key = param.name
        if key in step and key not in not_in_chain and key not in required:
            assert step[key] == _default(param), f"{method} step's {key} vs --{key.replace('_', '-')}"
            compared += 1
    assert compared >= 3


def test_no_command_function_takes_more_than_ten_parameters():
    """Shared options come in groups (model source, data, speed, output, fine-tune), one parameter each."""
    import inspect

    counts = {" ".join(path): len(inspect.signature(inspect.unwrap(command.callback)).parameters)
              for path, command in COMMANDS.items()}
    assert max(counts.values()) <= 10, {name: n for name, n in counts.items() if n > 10}


@pytest.mark.parametrize("method, argv, old, new, field, value", [
    ("vbp", ["--ratio", "0.5", "--finetune-epochs", "0"], "--finetune-epochs", "--epochs", None, None),
    ("vbp", ["--ratio", "0.5", "--no-distill"], "--no-distill", "--distill none", "distill", "none"),
    ("star", ["--rho", "0.7", "--alpha", "0.5"], "--alpha", "--attention-weight", "alpha", 0.5),
    # GMACs, the old --macs: the same target, now spelled with its unit (a bare number is a share).
    ("vbp", ["--macs", "0.002"], "--macs 0.002", "--target-macs 2M", "target_macs", MacTarget.absolute(2e6)),
    ("width", ["--macs", "0.002", "--convention", "tp"], "--macs 0.002", "--target-macs 2M", "target_macs",
     MacTarget.absolute(2e6, convention="tp")),
], ids=["valued", "switch", "renamed-flag", "gmacs", "gmacs-in-a-convention"])
def test_an_old_option_name_still_works_and_warns(capsys, monkeypatch, method, argv, old, new, field, value):
    from test_cli import run

    from vitprune.cli import methods

    calls = {}
    monkeypatch.setattr(f"vitprune.methods.{method}.pipeline.run_{method}",
                        lambda model, data, config, ctx: calls.update(config=config))
    monkeypatch.setattr(methods, "load_inputs", lambda *a, **k: (None, {}))
    monkeypatch.setattr(methods, "show_report", lambda *a: None)
    code, _, err = run(capsys, "prune", method, "digits-vit", "--data", "digits", *argv, "--out", "unused")
    assert code == 0, err
    assert f"{old} is now {new}; the old spelling goes in the next release" in err
    if field is not None:
        assert getattr(calls["config"], field) == value
