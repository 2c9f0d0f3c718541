"""Config fields that carry their command-line facts, so each default, choice list and help text lives once.

A method's config dataclass declares a field the CLI exposes with :func:`setting` instead of a bare default;
``vitprune.cli.config_options`` turns such fields into a command's options. Fields with a bare default stay
Python-only. Pure standard library: every layer that defines a config can use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass
from typing import Any

#: The key of a field's metadata that holds its :class:`CliFacts`.
CLI_METADATA = "vitprune.cli"
#: The one meaning of --seed on every command: a command draws all its randomness from one seed.
SEED_HELP = ("Seed of everything the command draws at random (a --no-pretrained model's weights, a new head, the "
             "calibration images, data order, augmentation): the same command gives the same result.")


@dataclass(frozen=True)
class CliFacts:
    """How a config field appears on the command line (see :func:`setting`)."""

    help: str
    #: The option's flags when not ``--field-name``: ``"--mixup"``, or ``"--hard/--soft"`` for a boolean.
    flag: str | None = None
    #: A short alias such as ``"-b"``.
    short: str | None = None
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    #: The command line must name it, though the Python API has a default.
    required: bool = False
    #: One of several alternative ways to set the same thing (STAR's rho, MAC target, hand-set rates): on the
    #: command line it is unset (``None``) unless named, and the config's ``validate`` wants exactly one.
    alternative: bool = False
    #: How the option's text becomes the field's value (``None``: typer reads it as the field's type); a
    #: :class:`~vitprune.errors.VitpruneError` it raises is the command's one-line error.
    parse: Callable[[str], Any] | None = None
    #: Old spellings of the flag, kept hidden for one release: they still work and warn that the name changed.
    aliases: tuple[str, ...] = ()
    #: How the old spellings' text becomes the field's value, where it meant something else (``None``: as ``parse``).
    alias_parse: Callable[[str], Any] | None = None


def setting(default: Any = MISSING, *, default_factory: Callable[[], Any] | Any = MISSING, help: str,
            flag: str | None = None, short: str | None = None, min: float | None = None, max: float | None = None,
            choices: Iterable[str] | None = None, required: bool = False, alternative: bool = False,
            parse: Callable[[str], Any] | None = None, aliases: Iterable[str] = (),
            alias_parse: Callable[[str], Any] | None = None) -> Any:
    """A dataclass field that the CLI exposes as an option; ``choices`` may be a registry (its keys are taken)."""
    facts = CliFacts(help=help, flag=flag, short=short, min=min, max=max,
                     choices=None if choices is None else tuple(choices), required=required,
                     alternative=alternative, parse=parse, aliases=tuple(aliases), alias_parse=alias_parse)
    return dataclasses.field(default=default, default_factory=default_factory, metadata={CLI_METADATA: facts})


class JsonRecord:
    """A dataclass whose JSON-ready form is its fields."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: the fields, as :func:`dataclasses.asdict` gives them, a value with a ``to_json`` (a MAC
        target) as that gives it."""
        return json_ready(dataclasses.asdict(self))


def json_ready(value: Any) -> Any:
    """``value`` with every object that has a ``to_json`` in it (in dicts, lists and tuples) replaced by its
    ``to_json()``."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, dict):
        return {key: json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(json_ready(item) for item in value)
    return value


def cli_facts(field: dataclasses.Field) -> CliFacts | None:
    """The command-line facts of a config field, or ``None`` for a field the CLI does not expose."""
    return field.metadata.get(CLI_METADATA)


__all__ = ["CLI_METADATA", "CliFacts", "JsonRecord", "cli_facts", "json_ready", "setting"]
