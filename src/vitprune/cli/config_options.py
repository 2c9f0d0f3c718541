"""A command's options generated from a config dataclass, so the CLI restates no default, choice list or help.

:func:`config_options` reads the fields a config declares with :func:`~vitprune.config.setting`, gives the
command one option per field (``--field-name`` unless the field names its flag; its type, default, help,
range and choices from the field), and calls the command with the config built from them.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
import warnings
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from typing import Any, Optional, TypeVar

import typer

from vitprune.config import CliFacts, cli_facts
from vitprune.errors import VitpruneError, VitpruneWarning

F = TypeVar("F", bound=Callable[..., Any])

#: What an option that changes a preset says of its default, in the form typer shows a default in.
PRESET_DEFAULT = "[default: the preset's]"


@dataclasses.dataclass(frozen=True)
class _Option:
    """One generated option: the config field it sets, its facts and the field's type."""

    name: str
    facts: CliFacts
    #: The field's type without ``None``.
    kind: Any
    optional: bool

    @property
    def flag(self) -> str:
        return self.facts.flag or "--" + self.name.replace("_", "-")

    @property
    def is_list(self) -> bool:
        return typing.get_origin(self.kind) is list

    def parameter(self, default: Any, parameter_kind: inspect._ParameterKind, *, required: bool = False,
                  unset: bool = False, prefix: str = "") -> inspect.Parameter:
        """The typer parameter (of ``parameter_kind``) that reads this option, its default the field's ``default``
        (``required``: none, the command line must name it; ``unset``: ``None``, the preset's)."""
        flags = [self.flag]
        if self.kind is bool and self.facts.flag is None:
            flags = [f"{self.flag}/--no-{self.flag[2:]}"]
        if self.facts.short:
            flags.append(self.facts.short)
        if (self.facts.required or required) and not self.facts.aliases:
            default = ...
        elif self.facts.alternative or unset or self.facts.required or required:
            default = None  # a required option with old spellings is checked once they are read (:meth:`given`)
        elif self.is_list and default is not None:
            default = ",".join(map(str, default)) or None  # an empty list is the option left out
        elif default is not None and self.facts.parse is not None:
            default = str(default)
        help = self.facts.help + (f"  {PRESET_DEFAULT}" if unset else "")
        option = typer.Option(default, *flags, help=help, min=self.facts.min, max=self.facts.max)
        return inspect.Parameter(prefix + self.name, parameter_kind, default=option,
                                 annotation=self._annotation(default, unset))

    def _annotation(self, default: Any, unset: bool) -> Any:
        value_type = self.choice_type if self.facts.choices else str if self.is_list or self.facts.parse else self.kind
        optional = self.optional or self.facts.alternative or unset or (self.is_list and default is None)
        return Optional[value_type] if optional else value_type

    def alias_parameters(self, parameter_kind: inspect._ParameterKind, prefix: str) -> list[inspect.Parameter]:
        """A hidden parameter per old spelling of the flag (unset unless named); ``--old=VALUE``, an old flag that
        meant one value, is a hidden switch."""
        parameters = []
        for alias in self.facts.aliases:
            flag, switch, _ = alias.partition("=")
            option = (typer.Option(False, flag, hidden=True) if switch else
                      typer.Option(None, flag, hidden=True, min=self.facts.min, max=self.facts.max))
            annotation = (bool if switch else Optional[str] if self.facts.alias_parse
                          else self._annotation(None, True))
            parameters.append(inspect.Parameter(self.alias_name(prefix, flag), parameter_kind, default=option,
                                                annotation=annotation))
        return parameters

    def alias_name(self, prefix: str, alias: str) -> str:
        return f"{prefix}{self.name}__{alias.lstrip('-').replace('-', '_')}"

    def given(self, kwargs: dict[str, Any], prefix: str, required: bool = False) -> Any:
        """The option's command-line value, popped from ``kwargs``; an old spelling used warns that the name changed,
        and its value is taken (typer cannot tell a new option named from one left at its default). A ``required``
        option with old spellings that none of them gave is one line."""
        value = kwargs.pop(prefix + self.name)
        for alias in self.facts.aliases:
            flag, switch, meant = alias.partition("=")
            old = kwargs.pop(self.alias_name(prefix, flag))
            if old is None or old is False:
                continue
            if switch:
                value, was, now = (self.choice_type(meant) if self.facts.choices else meant), flag, \
                    f"{self.flag} {meant}"
            elif self.facts.alias_parse is not None:
                value = self.facts.alias_parse(old)
                was, now = f"{flag} {old}", f"{self.flag} {value}"
            else:
                value, was, now = old, flag, self.flag
            warnings.warn(f"{was} is now {now}; the old spelling goes in the next release", VitpruneWarning,
                          stacklevel=2)
        if value is None and (required or self.facts.required) and self.facts.aliases:
            raise VitpruneError(f"missing option {self.flag}")
        return value

    @functools.cached_property
    def choice_type(self) -> type[Enum]:
        """The choices as the string Enum typer takes for a choice list (its members' values are the choices)."""
        return Enum(self.name, [(choice, choice) for choice in self.facts.choices], type=str)

    def value(self, given: Any) -> Any:
        """The field's value for what the command line gave."""
        if given is None:
            return None
        if isinstance(given, Enum):
            return given.value
        if self.is_list:
            (item,) = typing.get_args(self.kind)
            item = self.facts.parse or item
            try:
                return [item(part.strip()) for part in given.split(",") if part.strip()]
            except ValueError:
                example = "integers such as 0,3,7" if item is int else "values such as 1,1,0.7"
                raise VitpruneError(f"{self.flag} takes comma-separated {example}; got {given!r}") from None
        return self.facts.parse(given) if self.facts.parse is not None else given


def _options(config_cls: type, names: Iterable[str] | None) -> list[_Option]:
    """The options of ``config_cls``'s exposed fields (of those in ``names`` only, if given), in field order."""
    hints = typing.get_type_hints(config_cls)
    exposed = {field.name: facts for field in dataclasses.fields(config_cls) if (facts := cli_facts(field))}
    if names is not None:
        names = set(names)
        if not names <= set(exposed):
            raise TypeError(f"{config_cls.__name__} exposes no option {sorted(names - set(exposed))}")
        exposed = {name: facts for name, facts in exposed.items() if name in names}
    options = []
    for name, facts in exposed.items():
        kind, args = hints[name], typing.get_args(hints[name])
        optional = typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in args
        if optional:
            (kind,) = [arg for arg in args if arg is not type(None)]
        options.append(_Option(name, facts, kind, optional))
    return options


def option_defaults(config_cls: type, defaults: Mapping[str, Any] = {}) -> dict[str, Any]:
    """Each exposed field's default as the Python API has it (``defaults`` first); a required field has none."""
    found = {}
    for field in dataclasses.fields(config_cls):
        if cli_facts(field) is None:
            continue
        if field.name in defaults:
            found[field.name] = defaults[field.name]
        elif field.default is not dataclasses.MISSING:
            found[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            found[field.name] = field.default_factory()
    return found


def config_options(config_cls: type, *, param: str = "config", fields: Iterable[str] | None = None,
                   defaults: Mapping[str, Any] = {}, required: Iterable[str] = (),
                   overrides: bool = False, prefix: str = "") -> Callable[[F], F]:
    """Give a typer command an option per field ``config_cls`` exposes, in place of its parameter ``param``.

    The command is called with ``param`` set to ``config_cls`` built from those options, over ``defaults`` (a
    method's own defaults for a shared config, e.g. HiAP's training recipe); an option left out keeps the
    default, but for an alternative, which is ``None`` then. ``fields`` limits the options to some of the exposed
    fields; the others keep ``defaults`` or the config's own. ``required`` names options this command must be
    given though the config has a default. With ``overrides``, every option is unset unless named and ``param``
    is the dict of the fields named: the changes to a preset that the command resolves itself. ``prefix`` goes
    before each option's parameter name (not its flag), for a group whose field names another group also has.
    """
    options = _options(config_cls, fields)
    field_defaults = option_defaults(config_cls, defaults)
    required = set(required)
    if not required <= {option.name for option in options}:
        raise TypeError(f"{config_cls.__name__}: required options {sorted(required)} are not among its options")

    def decorate(command: F) -> F:
        signature = inspect.signature(command)
        clash = {prefix + option.name for option in options} & (set(signature.parameters) - {param})
        if param not in signature.parameters or clash:
            raise TypeError(f"{command.__name__}: needs a parameter {param!r} and none named as {sorted(clash)}")
        parameters: list[inspect.Parameter] = []
        for parameter in signature.parameters.values():
            if parameter.name != param:
                parameters.append(parameter)
                continue
            for option in options:
                parameters.append(option.parameter(field_defaults.get(option.name, ...), parameter.kind,
                                                   required=option.name in required, unset=overrides, prefix=prefix))
                parameters.extend(option.alias_parameters(parameter.kind, prefix))

        @functools.wraps(command)
        def run(**kwargs: Any) -> Any:
            values = {option.name: option.value(option.given(kwargs, prefix, option.name in required))
                      for option in options}
            given = {option.name: values[option.name] for option in options
                     if values[option.name] is not None or (option.facts.alternative and not overrides)}
            return command(**kwargs, **{param: given if overrides else config_cls(**{**defaults, **given})})

        run.__signature__ = signature.replace(parameters=parameters)  # what typer reads the options from
        # typer resolves the annotations by name: the generated parameters' instead of ``param``'s.
        run.__annotations__ = {p.name: p.annotation for p in parameters if p.annotation is not p.empty}
        return typing.cast(F, run)

    return decorate


def bundle(param: str, build: Callable[..., Any], parts: Iterable[str]) -> Callable[[F], F]:
    """Give a typer command the parameters ``parts`` in place of its parameter ``param`` (each then given its options
    by a decorator applied after this one, such as :func:`config_options`), and call it with ``param`` set to
    ``build(**parts)``: several groups reach the command as one value."""
    parts = tuple(parts)

    def decorate(command: F) -> F:
        signature = inspect.signature(command)
        parameters: list[inspect.Parameter] = []
        for parameter in signature.parameters.values():
            if parameter.name == param:
                parameters += [inspect.Parameter(name, parameter.kind, default=...) for name in parts]
            else:
                parameters.append(parameter)

        @functools.wraps(command)
        def run(**kwargs: Any) -> Any:
            bundled = build(**{name: kwargs.pop(name) for name in parts})
            return command(**kwargs, **{param: bundled})

        run.__signature__ = signature.replace(parameters=parameters)
        run.__annotations__ = {p.name: p.annotation for p in parameters if p.annotation is not p.empty}
        return typing.cast(F, run)

    return decorate


def option(config_cls: type, name: str, *, required: bool = False) -> Any:
    """The typer option of ``config_cls``'s field ``name`` on its own, for a command that takes that field as a plain
    parameter (``required``: the command line must name it): the same flags, default and help as the field's option
    wherever :func:`config_options` generates it."""
    (found,) = _options(config_cls, [name])
    return found.parameter(option_defaults(config_cls).get(name, ...), inspect.Parameter.KEYWORD_ONLY,
                           required=required).default


__all__ = ["PRESET_DEFAULT", "bundle", "config_options", "option", "option_defaults"]
