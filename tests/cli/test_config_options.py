"""Options generated from a config dataclass: each exposed field is one option whose facts are the field's, and the
command line builds the config the Python API builds from the same values."""

from __future__ import annotations

import dataclasses
import types
import typing
from enum import Enum

import pytest
from test_cli import run
from test_help import command_tree

from vitprune.cli import chain, methods, prune
from vitprune.cli.config_options import PRESET_DEFAULT, option_defaults
from vitprune.cli.options import DataSource, FinetuneOptions, ModelSource, RunOutput
from vitprune.config import cli_facts
from vitprune.measure import MacTarget
from vitprune.methods.depth import DepthConfig
from vitprune.methods.hetdpt.config import HetDPTBudget
from vitprune.methods.hetdpt.method import hetdpt_plus_steps
from vitprune.methods.hetdpt.pipeline import HetDPTConfig, StageOverrides, configure, preset
from vitprune.methods.hiap import TRAIN_DEFAULTS, HiAPConfig
from vitprune.methods.star.pipeline import STARConfig
from vitprune.methods.vbp.pipeline import VBPConfig
from vitprune.methods.width import WidthConfig
from vitprune.models import create_model
from vitprune.training import DistillConfig, TrainConfig

COMMANDS = command_tree()

#: Each converted command, the configs whose fields it exposes, the fields it takes of each (None: all), the
#: method's defaults over the config's own, the fields it must be given, and whether its options change a preset.
CONVERTED = [
    (("prune", "depth"), DepthConfig, None, {}, set(), False),
    (("prune", "width"), WidthConfig, None, {}, set(), False),
    (("prune", "hetdpt"), HetDPTConfig, None, {}, set(), True),
    (("prune", "hetdpt"), StageOverrides, None, {}, set(), True),
    (("prune", "hetdpt+"), WidthConfig, set(prune._PLUS_WIDTH), {}, {"target_macs"}, False),
    (("prune", "hetdpt+"), HetDPTConfig, {"distill"}, {}, set(), True),
    (("prune", "hetdpt+"), StageOverrides, None, {}, set(), True),
    (("prune", "vbp"), VBPConfig, None, {}, set(), False),
    (("prune", "star"), STARConfig, None, {}, set(), False),
    (("prune", "hiap"), HiAPConfig, None, {}, set(), False),
    # The fine-tune group: --preset, --epochs and the changes to the recipe (the method's own or --preset's).
    *((("prune", method), FinetuneOptions, None, {}, set(), False) for method in ("vbp", "star", "hiap")),
    *((path, group, None, {}, set(), False) for path in (("prune", "vbp"), ("prune", "hetdpt"), ("chain",))
      for group in (ModelSource, DataSource, RunOutput)),
    (("prune", "hetdpt"), HetDPTBudget, None, {}, set(), False),
    (("finetune",), TrainConfig, None, {}, set(), False),
    (("finetune",), DistillConfig, None, {}, set(), False),
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


@pytest.mark.parametrize("path, config_cls, names, defaults, required, overrides", CONVERTED,
                         ids=lambda x: " ".join(x) if isinstance(x, tuple) else getattr(x, "__name__", ""))
def test_each_exposed_field_is_one_option_with_its_facts(path, config_cls, names, defaults, required, overrides):
    params = COMMANDS[path].params
    expected_defaults = option_defaults(config_cls, defaults)
    hints = typing.get_type_hints(config_cls)
    for field, facts in _exposed(config_cls, names):
        matching = [p for p in params if p.name == field.name]
        assert len(matching) == 1, f"{' '.join(path)}: {field.name}"
        param = matching[0]
        assert (set(param.opts), param.secondary_opts) == _flags(field.name, facts, hints[field.name] is bool)
        assert param.help == (f"{facts.help}  {PRESET_DEFAULT}" if overrides else facts.help)
        assert (param.min, param.max) == (facts.min, facts.max)
        annotation = param.type_descriptor.annotation
        choices = tuple(member.value for member in annotation) if issubclass(annotation, Enum) else None
        assert choices == facts.choices
        if facts.aliases and (facts.required or field.name in required):
            # Checked once its old spellings are read (test_hetdpt_plus_needs_a_mac_target).
            assert param.default is None
        elif facts.required or field.name in required or field.name not in expected_defaults:
            assert param.required
        elif facts.alternative or overrides:
            assert param.default is None
        else:
            default = param.default.value if isinstance(param.default, Enum) else param.default
            expected = expected_defaults[field.name]
            if isinstance(expected, list):
                expected = ",".join(map(str, expected)) or None  # the command line's form; [] is left out
            elif expected is not None and facts.parse is not None:
                expected = str(expected)  # the option's text, which the field's parse reads
            assert default == expected, field.name


@pytest.fixture
def received(monkeypatch):
    """What the pipelines would have been handed: the patched callee's keyword arguments."""
    calls: dict = {}
    sets = lambda *a, **k: (None, {"train": None, "val": None, "calibration": None})  # noqa: E731
    monkeypatch.setattr(methods, "load_inputs", sets)
    monkeypatch.setattr(methods, "show_report", lambda *a: None)
    for method in ("vbp", "star"):
        monkeypatch.setattr(f"vitprune.methods.{method}.pipeline.run_{method}",
                            lambda model, data, config, ctx: calls.update(config=config))
    monkeypatch.setattr("vitprune.methods.hiap.pipeline.run_hiap",
                        lambda model, data, config, ctx: calls.update(config=config.config, train=config.train))
    monkeypatch.setattr("vitprune.methods.hetdpt.pipeline.run_hetdpt",
                        lambda model, data, config, ctx: calls.update(config=config.config))
    # What depth's and width's titles read of a report.
    report = types.SimpleNamespace(attention=[], activation=[], identity="norm", ratio=0.0, options={
        "importance": "magnitude", "isomorphic": True, "heads": 1.0, "head_dims": 0.5, "embed": True})
    for method in ("depth", "width"):
        monkeypatch.setattr(f"vitprune.methods.{method}.pipeline.run_{method}",
                            lambda model, data, config, ctx: calls.update(config=config) or report)
    monkeypatch.setattr("vitprune.models.resolve_model", lambda *a, **k: None)
    for module in (chain, prune):
        monkeypatch.setattr(module, "run_chain_command",
                            lambda model, config, run, **k: calls.update(steps=config.steps))
    return calls


def _prune(capsys, method, *argv, data=True):
    code, _, err = run(capsys, "prune", method, "digits-vit", *(["--data", "digits"] if data else []), "--out",
                       "unused", *argv)
    assert code == 0, err


def test_depth_options_build_the_api_config(capsys, received):
    _prune(capsys, "depth", "--attention", "3,1", "--activation", "2", "--identity", "skip", "--fold-norm",
           "--output-gelu", data=False)
    assert received["config"] == DepthConfig([3, 1], [2], identity="skip", fold_norm=True, output_gelu=True)
    _prune(capsys, "depth", "--activation", "0", data=False)
    assert received["config"] == DepthConfig(activation=[0])


def test_width_options_build_the_api_config(capsys, received):
    _prune(capsys, "width", "--target-macs", "500M", "--convention", "linear", "--heads", "0.5", "--head-dims", "0",
           "--no-embed", "--global", "--round-to", "8", "--taylor-batches", "3", "--taylor-batch-size", "16",
           data=False)
    expected = WidthConfig(target_macs=0.5e9, convention="linear", heads=0.5, head_dims=0.0, embed=False,
                           isomorphic=False, round_to=8, taylor_batches=3, taylor_batch_size=16)
    assert received["config"] == expected and expected.target_macs == MacTarget.absolute(5e8, convention="linear")
    _prune(capsys, "width", "--target-macs", "60%", data=False)
    assert received["config"].target_macs == MacTarget.relative(0.6)
    _prune(capsys, "width", "-p", "0.25", data=False)
    assert received["config"] == WidthConfig(ratio=0.25)


def test_hetdpt_options_change_the_preset_as_configure_does(capsys, received):
    _prune(capsys, "hetdpt", "--budget", "2")
    assert received["config"] == preset("digits")  # nothing named: the preset as it is
    _prune(capsys, "hetdpt", "--budget", "2", "--epochs", "3", "-b", "32", "--lr", "1e-3", "--distill", "hard",
           "--shortlist", "0.5", "--identity", "skip", "--output-gelu", "--min-per-type", "1", "--probe-epochs", "2",
           "--search-epochs", "5", "--no-merge")
    expected = configure("digits", epochs=3, batch_size=32, lr=1e-3, distill="hard", shortlist=0.5, identity="skip",
                         output_gelu=True, min_per_type=1, probe_epochs=2, search_epochs=5, merge=False)
    assert received["config"] == expected
    assert (expected.finetune.epochs, expected.search.epochs, expected.probe.epochs, expected.probe.batch_size,
            expected.finetune.lr, expected.search.lr) == (3, 5, 2, 32, 1e-3, preset("digits").search.lr * 32 / 64)


def test_hetdpt_plus_options_build_the_api_chain(capsys, received):
    _prune(capsys, "hetdpt+", "--budget", "4", "--split", "2,2", "--target-macs", "0.3G", "--importance", "taylor",
           "--heads", "0", "--round-to", "4", "--epochs", "2", "--distill", "hard", "--probe-epochs", "1")
    base = configure("digits", epochs=2, distill="hard")
    assert received["steps"] == hetdpt_plus_steps(
        budget=4, target_macs=300_000_000, split="2,2", preset="digits", convention="full",
        finetune={**dataclasses.asdict(base.finetune), "distill": "hard", "alpha": base.alpha, "tau": base.tau},
        hetdpt={"epochs": 2, "probe_epochs": 1, "distill": "hard"},  # HetDPT's own Stage 2 recovers, as configured
        width={"importance": "taylor", "heads": 0.0, "head_dims": 0.5, "embed": True, "isomorphic": True,
               "round_to": 4, "taylor_batches": WidthConfig().taylor_batches, "taylor_batch_size": 64, "seed": 0})


def test_hetdpt_plus_needs_a_mac_target(capsys):
    code, _, err = run(capsys, "prune", "hetdpt+", "digits-vit", "--data", "digits", "--out", "x", "--budget", "2")
    assert code == 2 and "missing option --target-macs" in err


def test_finetune_options_build_the_api_configs(capsys, tmp_path, monkeypatch):
    calls = {}
    monkeypatch.setattr("vitprune.training.finetune_pruned", lambda *a, **k: calls.update(config=a[3], **k) or [])
    original = create_model("digits-vit", depth=1)  # a teacher of the student's classes
    monkeypatch.setattr("vitprune.models.original_model", lambda student: original)
    code, _, err = run(capsys, "finetune", "digits-vit", "--no-pretrained", "--data", "digits", "--out",
                       str(tmp_path / "ft"), "--epochs", "2", "--optimizer", "sgd", "--momentum", "0.8", "--mixup",
                       "0.2", "--cutmix", "0.5", "--no-amp", "--ema-decay", "0.99", "--clip-grad", "1",
                       "--min-lr", "1e-6", "--distill", "soft", "--tau", "2")
    assert code == 0, err
    assert calls["config"] == TrainConfig(epochs=2, optimizer="sgd", momentum=0.8, mixup_alpha=0.2, cutmix_alpha=0.5,
                                          amp=False, ema_decay=0.99, clip_grad=1.0, min_lr=1e-6)
    assert (calls["teacher"], calls["distill"], calls["alpha"], calls["tau"]) == (
        original, "soft", DistillConfig.alpha, 2.0)


def test_vbp_options_build_the_api_config(capsys, received):
    _prune(capsys, "vbp", "--ratio", "0.3", "--criterion", "magnitude", "--no-compensate", "--min-width", "4",
           "--calibration-images", "64", "--seed", "3", "--alpha", "0.5", "--tau", "2")
    api = VBPConfig(ratio=0.3, criterion="magnitude", compensate=False, min_width=4, calibration_images=64, seed=3,
                    alpha=0.5, tau=2.0)
    # The command line fine-tunes only when asked (and then distils as the paper does, the API's default).
    assert received["config"] == dataclasses.replace(api, finetune=None)


def test_star_options_build_the_api_config(capsys, received):
    _prune(capsys, "star", "--target-macs", "1.5G", "--anchor", "minmax", "--distill", "soft", "--adaptive",
           "--classes", "3")
    assert received["config"] == STARConfig(rho=None, target_macs=1.5e9, anchor="minmax", distill="soft",
                                            adaptive=True, classes=3, finetune=None)
    _prune(capsys, "star", "--rates", "1,1,0.5")
    assert received["config"] == STARConfig(rho=None, rates=[1.0, 1.0, 0.5], finetune=None)


def test_hiap_options_build_the_api_configs(capsys, received):
    _prune(capsys, "hiap", "--epochs", "2", "--soft", "--cost-model", "exact", "--target-macs", "200M", "--lr", "1e-4")
    assert received["config"] == HiAPConfig(hard=False, cost_model="exact", target_macs=0.2e9)
    assert received["train"] == TrainConfig(**{**TRAIN_DEFAULTS, "epochs": 2, "lr": 1e-4})


def test_an_unknown_choice_is_a_one_line_usage_error(capsys):
    code, _, err = run(capsys, "prune", "vbp", "digits-vit", "--data", "digits", "--out", "x", "-p", "0.5",
                       "--criterion", "bogus")
    lines = [line for line in err.splitlines() if "bogus" in line]
    assert code == 2 and "Traceback" not in err
    assert len(lines) == 1 and "'--criterion'" in lines[0] and "'variance'" in lines[0] and "'random'" in lines[0]
