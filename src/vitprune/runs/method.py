"""One protocol for every method, and the registry the command line, chains and ``vitprune compare`` are generated
from.

A method is a :class:`Method` subclass in its own folder (``methods/NAME/method.py``): the core says what it is
(``name``, ``title``, its ``config`` dataclass, the data it reads, what it needs of a model's family) and names its one
entry point, ``run(model, data: MethodData, config, ctx: RunContext) -> Report`` (:func:`~vitprune.runs.context.
method_run`). Optional parts, mixed in as the adapters' capabilities are, give it more:

- :class:`CommandLine`: a ``vitprune prune NAME`` command, its options generated from the config, and its printed view;
- :class:`ChainStep`: a step of chains (``{"method": NAME, ...settings}``);
- :class:`TargetSearch`: an arm of ``vitprune compare``, brought to a MAC target by the method's own rate search.

Methods are found through the entry-point group :data:`ENTRY_POINT_GROUP`, vitprune's own as any other installed
package's, as timm finds its models in its registry:

    [project.entry-points."vitprune.methods"]
    my-method = "my_package.method:MyMethod"

This module and every ``method.py`` import no torch: the command line is built from them at start-up.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from dataclasses import MISSING, fields, replace
from importlib import metadata
from typing import TYPE_CHECKING, Any, ClassVar

from vitprune.errors import VitpruneError, VitpruneWarning
from vitprune.measure.target import MacTarget
from vitprune.training.config import TrainConfig, scaled_lr

if TYPE_CHECKING:
    from pathlib import Path
    from typing import TypeAlias

    from rich.console import Console
    from torch import nn

    from vitprune.runs.context import MethodData, RunContext
    from vitprune.runs.report import Report

    #: The model a hook is handed, as its annotations name it.
    Model: TypeAlias = nn.Module
else:  # the hooks' annotations are never evaluated: method.py files name the model type without importing torch
    Model = object


class Method:
    """A pruning method's core: subclass it, set the class attributes (and :attr:`entry`, where its entry point is not
    ``pipeline.run_NAME`` beside it); mix in the parts it has (:class:`CommandLine`, :class:`ChainStep`,
    :class:`TargetSearch`)."""

    #: The method's name: its command (``vitprune prune NAME``), its chain steps' ``method``, its entry point's name.
    name: ClassVar[str]
    #: How refusals name it ("VBP needs ...").
    title: ClassVar[str]
    #: The dataclass that holds everything the method needs.
    config: ClassVar[type]
    #: Its entry point, ``"module:function"``, a function marked by :func:`~vitprune.runs.context.method_run` (``None``:
    #: ``run_NAME`` in the ``pipeline`` module beside the method's own, as a method's folder lays it out).
    entry: ClassVar[str | None] = None
    #: The sets :meth:`run` reads, of ``train``, ``val`` and ``calibration``; ``()``: none.
    data: ClassVar[tuple[str, ...]] = ("train", "val", "calibration")
    #: Its output is one model directory (``ctx.run_dir`` is the model), not a run directory.
    out_is_model: ClassVar[bool] = False
    #: How the method does without a capability, by name (:meth:`~vitprune.adapters.ViTAdapter.require`).
    without: ClassVar[dict[str, str]] = {}
    #: Why it takes no MAC target, where it has no :class:`TargetSearch` part (``vitprune compare`` says so).
    no_target: ClassVar[str] = "takes no MAC target"

    def requires(self, config: Any) -> tuple[str, ...]:
        """The adapter capabilities ``config`` needs (:data:`vitprune.adapters.CAPABILITIES`)."""
        return tuple(getattr(config, "requires", ()))

    def entry_point(self) -> Callable[..., Report]:
        """The function :attr:`entry` names (imported on first use: it may import torch)."""
        folder = type(self).__module__.rpartition(".")[0]
        return named(self.entry or f"{folder}.pipeline:run_{self.name}")

    def run(self, model: Model, data: MethodData, config: Any, ctx: RunContext) -> Report:
        """Prune a copy of ``model`` as ``config`` says, save it under ``ctx.run_dir`` and return the report."""
        return self.entry_point()(model, data, config, ctx)


class CommandLine:
    """The part of a :class:`Method` that gives it ``vitprune prune NAME``: its options are its config's fields
    declared with :func:`vitprune.config.setting` (or :attr:`options`'), with the shared groups."""

    #: One line: the command's help.
    help: ClassVar[str]
    #: The command's help on its MODEL argument (empty: the shared one).
    model_help: ClassVar[str] = ""
    #: The command's ``--data`` is optional: the method runs without data.
    data_optional: ClassVar[bool] = False
    #: The dataclass the command's method options come from (``None``: the config); :meth:`from_command` turns it
    #: into the config.
    options: ClassVar[type | None] = None
    #: The training the command's fine-tune group (:class:`~vitprune.training.presets.FinetuneOptions`) changes where
    #: it names no --preset (``None``: the command takes no fine-tune group), at :attr:`train_batch` (``None``: the
    #: recipe's batch).
    recipe: ClassVar[TrainConfig | None] = None
    train_batch: ClassVar[int | None] = None
    #: The command is written by hand in ``cli/`` (HetDPT's, whose options change a preset) rather than generated.
    handwritten: ClassVar[bool] = False
    #: Its printed report, ``"module:function"`` of ``render(console, model, report)`` in the method's folder
    #: (``None``: the common view of a run, or of an edit saved as one model, with :meth:`title_of`).
    renderer: ClassVar[str | None] = None
    #: What it prints after each training epoch, ``"module:function"`` of ``view(console, stats)`` (``None``: nothing).
    epoch_renderer: ClassVar[str | None] = None

    def from_command(self, options: Any, training: TrainConfig | None) -> Any:
        """The config a command runs: its method options (an :attr:`options` instance) with the fine-tune group's
        ``training`` (``None``: no fine-tune), for a method with a :attr:`recipe` its config's ``finetune``."""
        return replace(options, finetune=training) if self.recipe is not None else options

    def title_of(self, report: Report) -> str:
        """A line on what the run did, for the printed report of a method whose output is one model."""
        return self.help.split(":")[0]

    def render(self, console: Console, model: str, report: Report) -> None:
        """The command's printed report (``model``: the starting checkpoint's name): :attr:`renderer`'s, else the
        common view of a run, or of an edit saved as one model."""
        from vitprune.runs.render import render_edit, render_report

        if self.renderer is not None:
            named(self.renderer)(console, model, report)
        elif getattr(self, "out_is_model", False):
            render_edit(console, report, title=f"{model}: {self.title_of(report)}")
        else:
            render_report(console, model, report, getattr(self, "name", ""))

    def epoch_view(self, console: Console) -> Callable[[dict[str, Any]], None] | None:
        """What the command prints after each training epoch, on ``console`` (``None``: nothing)."""
        if self.epoch_renderer is None:
            return None
        view = named(self.epoch_renderer)
        return lambda stats: view(console, stats)


class ChainStep:
    """The part of a :class:`Method` that makes it a step of chains: ``{"method": NAME, ...settings}``, its settings
    its config's fields."""

    #: The step takes a ``seed`` that a chain's seed fills in where the step names none.
    seeded: ClassVar[bool] = True
    #: The report fields a chain records in the step's summary.
    summary: ClassVar[tuple[str, ...]] = ()
    #: Settings a step cannot change, with their values (a chain recovers in its own ``finetune`` steps).
    fixed: ClassVar[dict[str, Any]] = {}
    #: What a step's settings are, for the chain's help and errors (default: the config's fields).
    settings: ClassVar[str] = ""

    def configure(self, settings: dict[str, Any], preset: str) -> Any:
        """The config a step's ``settings`` give (``preset``: the chain's default training preset, for methods whose
        defaults are a preset's); an unknown or missing setting is one line naming the method."""
        config = build_config(self.config, settings, self.name, fixed=self.fixed, defaults=self.defaults(settings))
        validate_config(config)
        return config

    def defaults(self, settings: dict[str, Any]) -> dict[str, Any]:
        """Defaults that a step's ``settings`` put in place of the config's own (none by default)."""
        return {}

    def summarize(self, report: Report, config: Any) -> dict[str, Any]:
        """What a chain records of a step's ``report``: its :attr:`summary` fields."""
        return {name: getattr(report, name) for name in self.summary}

    def settings_help(self) -> str:
        """What a step's settings are: :attr:`settings`, else the config's fields."""
        return self.settings or ", ".join(f.name for f in fields(self.config))


#: How much a method's own selection may cost in ``vitprune compare`` (:meth:`TargetSearch.target_steps`): ``quick``
#: (minutes for a small model on a CPU), ``standard`` (the settings sized for the embedded models) and ``paper`` (the
#: papers' own).
EFFORTS = ("quick", "standard", "paper")


class TargetSearch:
    """The part of a :class:`Method` that brings a model to a MAC target by its own rate search: an arm of
    ``vitprune compare``, and a step of the chains it runs."""

    def target_steps(self, model: Model, target: MacTarget, effort: str, *, exact: bool = True
                     ) -> list[dict[str, Any]]:
        """Chain steps, without recovery, that bring ``model`` to at most ``target`` by the method's own rate search;
        ``effort`` (:data:`EFFORTS`) sizes what its own selection costs (calibration images, search epochs). With
        ``exact`` false the steps may stop above the target, where a later step of a chain goes on (HetDPT: whole
        layers only). A target it cannot reach is an :class:`~vitprune.errors.UnreachableTargetError`."""
        raise NotImplementedError

    def search_cost(self, model: Model, step: dict[str, Any], images: int, val_images: int
                    ) -> tuple[float, float]:
        """What chain step ``step`` costs ``model``'s family to search, as images through a training step (forward,
        backward, update) and through a forward pass, on ``images`` training images and ``val_images`` validation
        images (a search that evaluates its candidates): ``vitprune compare``'s estimate times both on the model. None
        by default."""
        return 0.0, 0.0

    def reuse(self, step: dict[str, Any], earlier: dict[str, Any], step_dir: Path) -> dict[str, Any]:
        """Settings chain step ``step`` can take from ``earlier``, a step of this method finished under the same seed
        in ``step_dir`` (or, for an estimate, to be), instead of computing them again (HetDPT: the accuracy
        predictor an earlier step fitted); none by default."""
        return {}

    def shared_search(self, step: dict[str, Any], planned: list[dict[str, Any]]) -> dict[str, Any]:
        """Settings chain step ``step`` takes so that one search serves it and ``planned`` (this method's steps that
        a comparison plans: every target and arm) through :meth:`reuse` (HetDPT: Step 1's sweeps reaching the largest
        layer budget); none by default."""
        return {}

    def arm_steps(self, model: Model, target: MacTarget, effort: str, recovery: dict[str, Any]
                  ) -> list[dict[str, Any]]:
        """A ``vitprune compare`` arm: :meth:`target_steps`, then the recovery every arm gets (``recovery``: the
        ``finetune`` step's settings)."""
        return [*self.target_steps(model, target, effort), {"method": "finetune", **recovery}]


def named(spec: str) -> Any:
    """The object ``"module:name"`` names, its module imported on first use."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


#: The entry-point group methods are found through, vitprune's own and other packages' alike.
ENTRY_POINT_GROUP = "vitprune.methods"

_REGISTRY: dict[str, Method] = {}
#: Entry points that could not be loaded, by name (each warned about once).
_BROKEN: set[str] = set()


def register_method(method: Method) -> Method:
    """Add ``method`` to the registry (a later registration under the same name replaces the earlier one)."""
    if not isinstance(method, Method) or not getattr(method, "name", None) \
            or not isinstance(getattr(method, "config", None), type):
        raise TypeError(f"{type(method).__name__}: a method is a Method with a name and a config dataclass")
    _REGISTRY[method.name] = method
    return method


def unregister_method(name: str) -> None:
    """Remove a method registered under ``name`` (tests that register their own)."""
    _REGISTRY.pop(name, None)


#: The import path the entry points were last read for: what is installed changes with it.
_SCANNED: list[tuple[str, ...]] = []


def _discover() -> None:
    """Register each method the installed packages declare in :data:`ENTRY_POINT_GROUP` and that is not registered
    yet: vitprune's own first. One that cannot be loaded is left out with a warning. The packages are read again only
    when the import path changed."""
    path = tuple(sys.path)
    if _SCANNED == [path]:
        return
    found = metadata.entry_points(group=ENTRY_POINT_GROUP)
    own = [entry for entry in found if entry.dist is not None and entry.dist.name == "vitprune"]
    if not own:
        raise VitpruneError("vitprune's methods are not installed: its entry points are missing; reinstall it "
                            "(pip install -e . in a checkout)")
    _SCANNED[:] = [path]
    for entry in [*own, *(entry for entry in found if entry not in own)]:
        if entry.name in _REGISTRY or entry.name in _BROKEN:
            continue
        try:
            loaded = entry.load()
            method = loaded() if isinstance(loaded, type) else loaded
            if getattr(method, "name", None) != entry.name:
                raise TypeError(f"{entry.value} is named {getattr(method, 'name', None)!r}, not {entry.name!r}")
            register_method(method)
        except Exception as exc:  # another package's bug must not stop vitprune
            _BROKEN.add(entry.name)
            warnings.warn(f"method {entry.name!r} ({entry.value}) cannot be loaded and is left out: "
                          f"{type(exc).__name__}: {exc}", VitpruneWarning, stacklevel=2)


def methods() -> dict[str, Method]:
    """Every method: those the installed packages declare (vitprune's own first), then those registered by hand."""
    _discover()
    return dict(_REGISTRY)


def get_method(name: str) -> Method:
    """The method registered under ``name``; an unknown name is one line listing the known ones."""
    known = methods()
    if name not in known:
        raise VitpruneError(f"unknown method {name!r}; known: {', '.join(known)}")
    return known[name]


def step_methods() -> dict[str, ChainStep]:
    """The methods a chain step can name."""
    return {name: method for name, method in methods().items() if isinstance(method, ChainStep)}


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


__all__ = ["EFFORTS", "ENTRY_POINT_GROUP", "ChainStep", "CommandLine", "Method", "TargetSearch", "build_config",
           "build_train_config", "check_known", "get_method", "methods", "named", "register_method", "split_settings",
           "step_methods", "unregister_method", "validate_config"]
