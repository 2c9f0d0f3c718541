"""One protocol for every method, and the registry the CLI and chains are generated from.

A method is a :class:`Method` subclass in its own folder (``methods/NAME/method.py``), registered with
:func:`register_method`, as timm registers its models. It names a ``config`` dataclass that holds everything the
method needs (the fields the command line exposes are declared with :func:`vitprune.config.setting`), says what it
needs of the model's family (:meth:`Method.requires`) and runs as ``run(model, data, config, ctx) -> Report``:
``data`` holds the training, validation and calibration sets, ``ctx`` where and how it runs. The command line gives
every registered method a ``vitprune prune NAME`` command and chains take it as a step, without either knowing it.

This module and every ``method.py`` import no torch: the command line is built from them at start-up.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from vitprune.errors import VitpruneError
from vitprune.measure.config import SpeedConfig
from vitprune.training.config import TrainConfig, scaled_lr

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.utils.data import Dataset

    from vitprune.methods.report import Report
    from vitprune.training.distributed import DistContext


@dataclass
class MethodData:
    """The sets a method reads: ``train`` (augmented, for fine-tuning), ``val`` (evaluation) and ``calibration`` (the
    training images under the evaluation transform, for statistics and rankings; ``None``: ``train``)."""

    train: Dataset | None = None
    val: Dataset | None = None
    calibration: Dataset | None = None

    @property
    def calibration_or_train(self) -> Dataset | None:
        return self.calibration if self.calibration is not None else self.train


def _silent(_message: str) -> None:
    pass


@dataclass
class RunContext:
    """Where and how a method runs; the same for every method."""

    #: The run directory (stage files, ``model/``, ``report.json``); for a method whose ``out_is_model``, the model
    #: directory itself.
    run_dir: Path
    device: torch.device | str | None = None
    progress: bool = False
    resume: bool = False
    log: Callable[[str], None] = _silent
    #: How the result is timed against the starting model (off inside a chain: the chain times its final model).
    speed: SpeedConfig = field(default_factory=SpeedConfig)
    #: The torchrun context (``None``: one process).
    dist: DistContext | None = None
    #: The model a fine-tune distils from (``None``: the model the method starts from).
    teacher: nn.Module | None = None
    #: The starting checkpoint's name, for the report.
    name: str | None = None
    #: Called with each training epoch's figures, by methods that train.
    on_epoch: Callable[[dict[str, Any]], None] | None = None

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir)

    def device_for(self, model: nn.Module) -> torch.device:
        """Where the run computes: :attr:`device`, else under torchrun this process's, else ``model``'s."""
        import torch

        if self.device is not None:
            return torch.device(self.device)
        return self.dist.device if self.dist is not None else next(model.parameters()).device

    def pipeline_options(self) -> dict[str, Any]:
        """The keyword arguments of the run-directory pipelines that take no context (``run_hetdpt``, ``run_hiap``,
        ``run_chain``)."""
        return {"run_dir": self.run_dir, "device": self.device, "progress": self.progress, "log": self.log,
                "resume": self.resume, "speed": self.speed, "dist": self.dist}


class Method:
    """A pruning method: subclass it, set the class attributes, implement :meth:`run`, and register an instance with
    :func:`register_method`."""

    #: The method's name: its command (``vitprune prune NAME``) and its chain steps' ``method``.
    name: ClassVar[str]
    #: How refusals name it ("VBP needs ...").
    title: ClassVar[str]
    #: One line: the command's help.
    help: ClassVar[str]
    #: The command's help on its MODEL argument (empty: the shared one).
    model_help: ClassVar[str] = ""
    #: The dataclass that holds everything the method needs; a chain step's settings are its fields.
    config: ClassVar[type]
    #: The sets :meth:`run` reads, of ``train``, ``val`` and ``calibration``; ``()``: none (the command takes no
    #: ``--data``). :attr:`data_optional`: the method runs without them (the command's ``--data`` is optional).
    data: ClassVar[tuple[str, ...]] = ("train", "val", "calibration")
    data_optional: ClassVar[bool] = False
    #: The dataclass the command's method options come from (``None``: :attr:`config`); :meth:`from_command` turns
    #: it into the config.
    options: ClassVar[type | None] = None
    #: The training the command's fine-tune group (:class:`~vitprune.training.presets.FinetuneOptions`) changes where
    #: it names no --preset (``None``: the command takes no fine-tune group), at :attr:`train_batch` (``None``: the
    #: recipe's batch).
    recipe: ClassVar[TrainConfig | None] = None
    train_batch: ClassVar[int | None] = None
    #: Whether the command line gives it a ``vitprune prune NAME`` command (``False``: a step of chains alone, or a
    #: method with a command of its own).
    command: ClassVar[bool] = True
    #: Its output is one model directory (``--out`` is the model), not a run directory.
    out_is_model: ClassVar[bool] = False
    #: Its config has a ``seed`` a chain's own seed fills in when the step names none.
    seeded: ClassVar[bool] = True
    #: The report fields a chain records in the step's summary.
    summary: ClassVar[tuple[str, ...]] = ()
    #: How the method does without a capability, by name (:meth:`~vitprune.adapters.ViTAdapter.require`).
    without: ClassVar[dict[str, str]] = {}
    #: Settings a chain step cannot change, with their values (a chain recovers in its own ``finetune`` steps).
    fixed: ClassVar[dict[str, Any]] = {}
    #: What a chain step's settings are, for the chain's help and errors (default: the config's fields).
    settings: ClassVar[str] = ""
    #: Why ``vitprune compare`` leaves it out (``None``: it takes part, through :meth:`target_steps`).
    compare_skip: ClassVar[str | None] = "takes no MAC target"

    def configure(self, settings: dict[str, Any], preset: str) -> Any:
        """The config a chain step's ``settings`` give (``preset``: the chain's default training preset, for
        methods whose defaults are a preset's); an unknown or missing setting is one line naming the method."""
        config = build_config(self.config, settings, self.name, fixed=self.fixed, defaults=self.defaults(settings))
        validate_config(config)
        return config

    def defaults(self, settings: dict[str, Any]) -> dict[str, Any]:
        """Defaults that a chain step's ``settings`` put in place of the config's own (none by default)."""
        return {}

    def from_command(self, options: Any, training: TrainConfig | None) -> Any:
        """The config a command runs: its method options (an :attr:`options` instance) with the fine-tune group's
        ``training`` (``None``: no fine-tune), for a method with a :attr:`recipe` its config's ``finetune``."""
        return replace(options, finetune=training) if self.recipe is not None else options

    def requires(self, config: Any) -> tuple[str, ...]:
        """The adapter capabilities ``config`` needs (:data:`vitprune.adapters.CAPABILITIES`)."""
        return tuple(getattr(config, "requires", ()))

    def run(self, model: nn.Module, data: MethodData, config: Any, ctx: RunContext) -> Report:
        """Prune a copy of ``model`` as ``config`` says, save it under ``ctx.run_dir`` and return the report."""
        raise NotImplementedError

    def target_steps(self, model: nn.Module, macs: float, effort: str, *, exact: bool = True
                     ) -> list[dict[str, Any]]:
        """Chain steps, without recovery, that bring ``model`` to at most ``macs`` full-convention MACs per image by
        the method's own rate search (for ``vitprune compare``); ``effort`` (:data:`EFFORTS`) sizes what its own
        selection costs (calibration images, search epochs). With ``exact`` false the steps may stop above ``macs``,
        where a later step of a chain goes on (HetDPT: whole layers only). A target it cannot aim at is a
        :class:`~vitprune.errors.VitpruneError` saying why."""
        raise VitpruneError(f"{self.title} {self.compare_skip}")

    def arm_steps(self, model: nn.Module, macs: float, effort: str, recovery: dict[str, Any]) -> list[dict[str, Any]]:
        """A ``vitprune compare`` arm: :meth:`target_steps`, then the recovery every arm gets (``recovery``: the
        ``finetune`` step's settings)."""
        return [*self.target_steps(model, macs, effort), {"method": "finetune", **recovery}]

    def title_of(self, report: Report) -> str:
        """A line on what the run did, for the printed report (the generated command's title)."""
        return self.help.split(":")[0]

    def summarize(self, report: Report, config: Any) -> dict[str, Any]:
        """What a chain records of a step's ``report``: its :attr:`summary` fields."""
        return {name: getattr(report, name) for name in self.summary}

    def settings_help(self) -> str:
        """What a chain step's settings are: :attr:`settings`, else the config's fields."""
        return self.settings or ", ".join(f.name for f in fields(self.config))


#: How much a method's own selection may cost in ``vitprune compare`` (:meth:`Method.target_steps`): ``quick``
#: (minutes for a small model on a CPU), ``standard`` (the settings sized for the embedded models) and ``paper`` (the
#: papers' own).
EFFORTS = ("quick", "standard", "paper")

_REGISTRY: dict[str, Method] = {}

#: The folders of the methods vitprune ships, each registering its methods in ``vitprune.methods.NAME.method`` when
#: first asked for (``hetdpt`` registers its ``merge`` too).
_BUILTIN = ("depth", "width", "hetdpt", "vbp", "star", "hiap", "finetune")


def register_method(method: Method) -> Method:
    """Add ``method`` to the registry (a later registration under the same name replaces the earlier one)."""
    if not getattr(method, "name", None) or not isinstance(getattr(method, "config", None), type):
        raise TypeError(f"{type(method).__name__}: a method needs a name and a config dataclass")
    _REGISTRY[method.name] = method
    return method


def unregister_method(name: str) -> None:
    """Remove a method registered under ``name`` (tests that register their own)."""
    _REGISTRY.pop(name, None)


def _load_builtin() -> None:
    for name in _BUILTIN:
        importlib.import_module(f"vitprune.methods.{name}.method")


def methods() -> dict[str, Method]:
    """Every registered method by name: vitprune's own first, then those registered since."""
    _load_builtin()
    return dict(_REGISTRY)


def get_method(name: str) -> Method:
    """The method registered under ``name``; an unknown name is one line listing the known ones."""
    known = methods()
    if name not in known:
        raise VitpruneError(f"unknown method {name!r}; known: {', '.join(known)}")
    return known[name]


def build_config(cls: type, settings: dict[str, Any], method: str, *, fixed: dict[str, Any] | None = None,
                 defaults: dict[str, Any] | None = None) -> Any:
    """``cls(**settings)`` with ``defaults`` under and ``fixed`` over them; unknown or missing settings are one
    line naming ``method``."""
    fixed = fixed or {}
    check_known(settings, {f.name for f in fields(cls)} - set(fixed), method)
    given = {**(defaults or {}), **settings, **fixed}
    missing = [f.name for f in fields(cls) if f.name not in given and f.default is MISSING
               and f.default_factory is MISSING]
    if missing:
        raise VitpruneError(f"{method} step: missing setting(s) {', '.join(missing)}")
    return cls(**given)


def build_train_config(settings: dict[str, Any], method: str, defaults: dict[str, Any] | None = None) -> TrainConfig:
    """The :class:`~vitprune.training.TrainConfig` of a step's training ``settings`` over ``defaults`` (a preset's),
    validated; a preset's lr is for its batch, so a step that names another batch and no lr gets it scaled."""
    given = dict(settings)
    if defaults and {"lr", "batch_size"} <= defaults.keys() and "batch_size" in settings and "lr" not in settings:
        given["lr"] = scaled_lr(defaults["lr"], defaults["batch_size"], settings["batch_size"])
    train = build_config(TrainConfig, given, method, defaults=defaults)
    train.validate()
    return train


def check_known(settings: dict[str, Any], known: set[str], method: str) -> None:
    """One line naming the settings of a ``method`` step that ``known`` does not hold."""
    unknown = sorted(set(settings) - known)
    if unknown:
        raise VitpruneError(f"{method} step: unknown setting(s) {', '.join(unknown)} "
                            f"(known: {', '.join(sorted(known))})")


def split_settings(settings: dict[str, Any], names: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``settings`` divided into those named in ``names`` and the rest."""
    return ({k: v for k, v in settings.items() if k in names}, {k: v for k, v in settings.items() if k not in names})


def validate_config(config: Any) -> None:
    """``config.validate()`` where the config has one (one line for settings that cannot run)."""
    validate = getattr(config, "validate", None)
    if validate is not None:
        validate()


__all__ = ["EFFORTS", "Method", "MethodData", "RunContext", "build_config", "build_train_config", "check_known",
           "get_method", "methods", "register_method", "split_settings", "unregister_method", "validate_config"]
