"""Options generated from a config dataclass: each exposed field is one option whose facts are the field's, and the
command line builds the config the Python API builds from the same values."""

from __future__ import annotations

import dataclasses
import typing
from enum import Enum

import pytest
from test_cli import run
from test_help import command_tree

from vitprune.cli import prune
from vitprune.cli.config_options import option_defaults
from vitprune.config import cli_facts
from vitprune.methods.hiap import TRAIN_DEFAULTS, HiAPConfig
from vitprune.methods.star.pipeline import STARConfig
from vitprune.methods.vbp.pipeline import VBPConfig
from vitprune.training import TrainConfig

COMMANDS = command_tree()

#: Each converted command, the configs whose fields it exposes, the fields it takes of each (None: all) and the
#: method's defaults over the config's own.
CONVERTED = [
    (("prune", "vbp"), VBPConfig, None, {}),
    (("prune", "star"), STARConfig, None, {}),
    (("prune", "hiap"), HiAPConfig, None, {}),
    (("prune", "hiap"), TrainConfig, {"epochs", "lr", "batch_size", "seed"}, TRAIN_DEFAULTS),
]


def _flags(name: str, facts, is_bool: bool) -> tuple[set[str], list[str]]:
    """The option names (with the short alias) and the negative flag a field's facts ask for."""
    flag = facts.flag or "--" + name.replace("_", "-")
    primary, _, negative = flag.partition("/")
    if is_bool and facts.flag is None:
        negative = "--no-" + flag[2:]
    return {primary} | ({facts.short} if facts.short else set()), [negative] if negative else []


def _exposed(config_cls, names):
    return [(field, facts) for field in dataclasses.fields(config_cls)
            if (facts := cli_facts(field)) and (names is None or field.name in names)]


@pytest.mark.parametrize("path, config_cls, names, defaults", CONVERTED,
                         ids=lambda x: " ".join(x) if isinstance(x, tuple) else getattr(x, "__name__", ""))
def test_each_exposed_field_is_one_option_with_its_facts(path, config_cls, names, defaults):
    params = COMMANDS[path].params
    expected_defaults = option_defaults(config_cls, defaults)
    hints = typing.get_type_hints(config_cls)
    for field, facts in _exposed(config_cls, names):
        matching = [p for p in params if p.name == field.name]
        assert len(matching) == 1, f"{' '.join(path)}: {field.name}"
        param = matching[0]
        assert (set(param.opts), param.secondary_opts) == _flags(field.name, facts, hints[field.name] is bool)
        assert param.help == facts.help
        assert (param.min, param.max) == (facts.min, facts.max)
        annotation = param.type_descriptor.annotation
        choices = tuple(member.value for member in annotation) if issubclass(annotation, Enum) else None
        assert choices == facts.choices
        if facts.required or field.name not in expected_defaults:
            assert param.required
        elif facts.alternative:
            assert param.default is None
        else:
            default = param.default.value if isinstance(param.default, Enum) else param.default
            expected = expected_defaults[field.name]
            if expected is not None and facts.scale != 1:
                expected = expected / facts.scale  # the option is in the command line's unit
            assert default == expected, field.name


@pytest.fixture
def received(monkeypatch):
    """What the pipelines would have been handed: the patched callee's keyword arguments."""
    calls: dict = {}
    monkeypatch.setattr(prune, "_run_calibrated", lambda run, render, config, **_: calls.update(config=config))
    monkeypatch.setattr(prune, "_load_inputs", lambda *a, **k: (None, {"train": None, "val": None}))
    monkeypatch.setattr(prune, "_show", lambda *a: None)
    monkeypatch.setattr("vitprune.methods.hiap.run_hiap", lambda *a, **k: calls.update(k))
    return calls


def _prune(capsys, method, *argv):
    code, _, err = run(capsys, "prune", method, "digits-vit", "--data", "digits", "--out", "unused", *argv)
    assert code == 0, err


def test_vbp_options_build_the_api_config(capsys, received):
    _prune(capsys, "vbp", "--ratio", "0.3", "--criterion", "magnitude", "--no-compensate", "--min-width", "4",
           "--calibration-images", "64", "--seed", "3", "--alpha", "0.5", "--tau", "2")
    api = VBPConfig(ratio=0.3, criterion="magnitude", compensate=False, min_width=4, calibration_images=64, seed=3,
                    alpha=0.5, tau=2.0)
    # The command line fine-tunes and distils only when asked.
    assert received["config"] == dataclasses.replace(api, finetune=None, distill="none")


def test_star_options_build_the_api_config(capsys, received):
    _prune(capsys, "star", "--macs", "1.5", "--anchor", "minmax", "--distill", "soft", "--adaptive", "--classes", "3")
    assert received["config"] == STARConfig(rho=None, target_macs=1.5e9, anchor="minmax", distill="soft",
                                            adaptive=True, classes=3, finetune=None)
    _prune(capsys, "star", "--rates", "1,1,0.5")
    assert received["config"] == STARConfig(rho=None, rates=[1.0, 1.0, 0.5], finetune=None)


def test_hiap_options_build_the_api_configs(capsys, received):
    _prune(capsys, "hiap", "--epochs", "2", "--soft", "--cost-model", "exact", "--macs", "0.2", "--lr", "1e-4")
    assert received["config"] == HiAPConfig(hard=False, cost_model="exact", target_macs=0.2e9)
    assert received["train"] == TrainConfig(**{**TRAIN_DEFAULTS, "epochs": 2, "lr": 1e-4})


def test_an_unknown_choice_is_a_one_line_usage_error(capsys):
    code, _, err = run(capsys, "prune", "vbp", "digits-vit", "--data", "digits", "--out", "x", "-p", "0.5",
                       "--criterion", "bogus")
    lines = [line for line in err.splitlines() if "bogus" in line]
    assert code == 2 and "Traceback" not in err
    assert len(lines) == 1 and "'--criterion'" in lines[0] and "'variance'" in lines[0] and "'random'" in lines[0]
