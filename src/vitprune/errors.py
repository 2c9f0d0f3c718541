"""User-facing errors.

A :class:`VitpruneError` is a mistake the user can fix (unknown model, bad path, corrupt weights,
unsupported architecture). The CLI prints its message as one line and exits non-zero, without a
traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterable


class VitpruneError(Exception):
    """A problem with the user's input, reported as one clear line."""

    exit_code: int = 2


class UnsupportedArchitectureError(VitpruneError):
    """The model contains a structure vitprune cannot represent faithfully."""


class UnreachableTargetError(VitpruneError):
    """A method's rate search cannot bring the model to the MAC target it was given (``vitprune compare`` reports such
    an arm as unreachable at that target)."""


class RecipeError(VitpruneError):
    """A saved model's recipe or weights are missing, corrupt or inconsistent."""


class VitpruneWarning(UserWarning):
    """Something the user may want to fix that does not stop the work (a class with no images in one split); the CLI
    prints it as one ``warning:`` line."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (at most 200 characters), for a one-line error about it."""
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


def check_settings(checks: Iterable[tuple[bool, str]]) -> None:
    """Raise a :class:`VitpruneError` with the message of the first ``(ok, message)`` pair that is not ok."""
    for ok, message in checks:
        if not ok:
            raise VitpruneError(message)
