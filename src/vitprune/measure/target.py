"""A MAC target: one value with one meaning wherever a method aims at a cost, and the one search that reaches it.

:class:`MacTarget` is a share of the starting model's MACs (``0.6``, ``"60%"``) or an absolute count per image
(``"1.2G"``, ``"850M"``, ``1200000000``), in a counting convention (:data:`~vitprune.measure.CONVENTIONS`). It
resolves to absolute MACs for a model (:meth:`MacTarget.resolve`). Its JSON form is a number: below 1 a share, from 1
on a count, so a chain file's ``"target_macs": 0.6`` and ``"target_macs": 1200000000`` mean what they say.

Every method that prunes to a target (VBP's neuron count, width pruning's ratio, STAR's keep rate, HiAP's hardening
threshold, HetDPT's layer budget) finds it with :func:`reach`, so they agree at the edges: a target at or above the
model's own MACs is one error, and one below what the method can reach is an
:class:`~vitprune.errors.UnreachableTargetError` naming the nearest it reaches.

Imports no torch: configs and the command line hold targets.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from vitprune.errors import UnreachableTargetError, VitpruneError
from vitprune.measure.config import CONVENTIONS, format_count

if TYPE_CHECKING:
    from torch import nn

#: A model's MACs are on a target within this share of it (``vitprune compare``'s arms).
ON_TARGET = 0.01

#: How a MAC target is written (the command line's ``--target-macs``, a chain file's ``target_macs``).
SPELLING = "a share of the model's MACs (0.6 or 60%) or MACs per image with a unit (850M, 1.2G)"
_UNITS = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_TEXT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(%|[kKmMgGtT])?\s*$")


class MacTarget:
    """MACs per image to reach: a ``share`` of the starting model's, or an absolute count, in ``convention``."""

    __slots__ = ("value", "share", "convention")

    def __init__(self, value: float, *, share: bool, convention: str = "full") -> None:
        if convention not in CONVENTIONS:
            raise VitpruneError(f"unknown MAC convention {convention!r} (choose from: {', '.join(CONVENTIONS)})")
        if share and not 0 < value < 1:
            raise VitpruneError(f"a share of the model's MACs lies between 0 and 1 (0% and 100%), got {value:g}")
        if not share and not (math.isfinite(value) and value >= 1):
            raise VitpruneError(f"a MAC target is {SPELLING}; got {value:g} MACs")
        self.value, self.share, self.convention = float(value), share, convention

    @classmethod
    def parse(cls, spelled: str | float | MacTarget, *, convention: str = "full") -> MacTarget:
        """The target ``spelled`` says: a number below 1 or a percentage is a share; a whole number from 1 on, or a
        number with a unit (K, M, G, T), a count of MACs per image. A :class:`MacTarget` comes back in
        ``convention``."""
        if isinstance(spelled, MacTarget):
            return spelled.in_convention(convention)
        if isinstance(spelled, bool):
            raise VitpruneError(f"a MAC target is {SPELLING}; got {spelled}")
        if isinstance(spelled, (int, float)):
            if 0 < spelled < 1:
                return cls(spelled, share=True, convention=convention)
            if spelled >= 1:
                return cls(spelled, share=False, convention=convention)
            raise VitpruneError(f"a MAC target is {SPELLING}; got {spelled!r}")
        match = _TEXT.match(str(spelled))
        if match is None:
            raise VitpruneError(f"a MAC target is {SPELLING}; got {spelled!r}")
        number, unit = float(match.group(1)), (match.group(2) or "")
        if unit == "%":
            return cls(number / 100, share=True, convention=convention)
        if unit:
            return cls(number * _UNITS[unit.upper()], share=False, convention=convention)
        if number >= 1 and not number.is_integer():
            raise VitpruneError(f"{spelled!r} is neither a share (below 1) nor a whole count of MACs; for GMACs "
                                f"write {match.group(1)}G")
        return cls.parse(number, convention=convention)

    @classmethod
    def relative(cls, share: float, *, convention: str = "full") -> MacTarget:
        """``share`` of the starting model's MACs."""
        return cls(share, share=True, convention=convention)

    @classmethod
    def absolute(cls, macs: float, *, convention: str = "full") -> MacTarget:
        """``macs`` MACs per image."""
        return cls(macs, share=False, convention=convention)

    @classmethod
    def from_gmacs(cls, text: str) -> MacTarget:
        """The target an old ``--macs`` option meant: GMACs per image (the spelling before :meth:`parse`'s)."""
        try:  # in decimal: 0.0159 GMACs is 15,900,000 MACs exactly, as the user meant
            macs = float(Decimal(str(text).strip()) * 10**9)
        except (InvalidOperation, ValueError):
            raise VitpruneError(f"--macs takes GMACs per image, such as 1.2; got {text!r}") from None
        return cls(macs, share=False)

    @classmethod
    def coerce(cls, value: Any, *, convention: str = "full") -> MacTarget | None:
        """``value`` (a target, its spelling or its JSON form) as a :class:`MacTarget` in ``convention``; ``None``
        stays ``None``."""
        return None if value is None else cls.parse(value, convention=convention)

    def in_convention(self, convention: str) -> MacTarget:
        """The same target counted in ``convention``."""
        return self if convention == self.convention else MacTarget(self.value, share=self.share,
                                                                    convention=convention)

    def of(self, dense: float) -> float:
        """Absolute MACs per image for a model that costs ``dense`` (in this target's convention)."""
        return self.value * dense if self.share else self.value

    def resolve(self, model: nn.Module) -> float:
        """Absolute MACs per image for ``model`` (a share counts ``model`` in this target's convention; a count is
        itself)."""
        return self.of(dense_macs(model, self.convention)) if self.share else self.value

    def to_json(self) -> float | int:
        """The JSON form, which :meth:`parse` reads back to the same target: a share as itself (below 1), a count
        as a number from 1 on (an ``int`` where it is whole)."""
        return self.value if self.share or not self.value.is_integer() else int(self.value)

    def __str__(self) -> str:
        """As a person writes it: ``60%``, ``1.2G``."""
        return f"{100 * self.value:g}%" if self.share else format_count(self.value)

    def describe(self, model: nn.Module | None = None) -> str:
        """The target in words, resolved where ``model`` is given: ``60% of the MACs (1.2G, full convention)``."""
        where = f"{self.convention} convention"
        if not self.share:
            return f"{format_count(self.value)} MACs ({where})"
        resolved = f"{format_count(self.resolve(model))}, " if model is not None else ""
        return f"{self} of the MACs ({resolved}{where})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MacTarget) and (self.value, self.share, self.convention) == (
            other.value, other.share, other.convention)

    def __hash__(self) -> int:
        return hash((self.value, self.share, self.convention))

    def __repr__(self) -> str:
        return f"MacTarget({self!s}, convention={self.convention!r})"


def dense_macs(model: nn.Module, convention: str = "full") -> int:
    """``model``'s MACs per image in ``convention`` (:func:`~vitprune.measure.count_macs`)."""
    from vitprune.measure.macs import count_macs

    return count_macs(model, convention=convention).macs


def goal(target: MacTarget, model: nn.Module, dense: float | None = None) -> tuple[float, float]:
    """``target`` resolved for ``model``, with ``model``'s own MACs (``dense``, else counted in the target's
    convention); a target at or above them is one line: there is nothing to prune."""
    dense = dense_macs(model, target.convention) if dense is None else dense
    wanted = target.of(dense)
    if wanted >= dense:
        spelled = f"{target} ({format_count(wanted)})" if target.share else str(target)
        raise VitpruneError(f"the MAC target {spelled} is not below the model's "
                            f"{format_count(dense)} MACs per image ({target.convention} convention): there is nothing "
                            "to prune")
    return wanted, dense


def resolve_shares(config: Any, model: nn.Module) -> Any:
    """``config`` (a dataclass, and those it holds) with every share :class:`MacTarget` in it resolved for ``model``
    into an absolute one: a chain's later step aims at a share of the model the chain started from, not of what the
    steps before it left."""
    if isinstance(config, MacTarget):
        return MacTarget.absolute(config.resolve(model), convention=config.convention) if config.share else config
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        return config
    changed = {f.name: value for f in dataclasses.fields(config) if f.init
               if (value := resolve_shares(getattr(config, f.name), model)) is not getattr(config, f.name)}
    return dataclasses.replace(config, **changed) if changed else config


def first(ok: Callable[[float], bool], lo: float, hi: float, *, integer: bool = False, steps: int | None = None,
          tol: float | None = None, guess: float | None = None) -> float | None:
    """The first knob from ``lo`` towards ``hi`` (``hi`` may lie below ``lo``) where ``ok`` holds, for an ``ok`` that
    fails up to some point and holds from there on (``None``: it fails even at ``hi``).

    ``integer``: the knob takes whole values and the answer is exact; ``guess`` says where to look first (brackets
    widen from it, so a guess near the answer saves calls). Otherwise the knob is continuous: bisected ``steps``
    times, or until the bracket is at most ``tol`` wide, the answer being the bracket's end where ``ok`` holds.
    """
    if not ok(hi):
        return None
    good, bad = hi, lo
    if not integer:
        count = 0
        while (steps is None or count < steps) and (tol is None or abs(good - bad) > tol):
            mid = (good + bad) / 2
            good, bad = (mid, bad) if ok(mid) else (good, mid)
            count += 1
        return good
    # Whole steps from lo: 0 is lo, n is hi (where ok holds), -1 a step before lo (where it fails).
    direction, n = (1 if hi >= lo else -1), abs(round(hi) - round(lo))

    def holds(t: int) -> bool:
        return ok(round(lo) + direction * t)

    good_t, bad_t = n, -1
    if guess is not None:
        at, span = min(max(round(abs(guess - lo)), 0), n), 1
        if holds(at):
            good_t, probe = at, at - 1
            while probe >= 0 and holds(probe):
                good_t, span = probe, 2 * span
                probe = good_t - span
            bad_t = max(probe, -1)
        else:
            bad_t, probe = at, at + 1
            while probe < n and not holds(probe):
                bad_t, span = probe, 2 * span
                probe = bad_t + span
            good_t = min(probe, n)
    while good_t - bad_t > 1:
        mid = (good_t + bad_t) // 2
        good_t, bad_t = (mid, bad_t) if holds(mid) else (good_t, mid)
    return round(lo) + direction * good_t


def reach(cost: Callable[[float], float | None], target: MacTarget, model: nn.Module, lo: float, hi: float, *,
          what: str, beyond: str = "", dense: float | None = None, integer: bool = False, steps: int | None = None,
          tol: float | None = None, guess: float | None = None, above: bool = False) -> float:
    """The knob nearest ``lo`` (no pruning) in ``[lo, hi]`` whose ``cost`` is at most ``target`` for ``model``, the
    knob at ``hi`` pruning most. With ``above``, the knob tried next to it on ``lo``'s side, whose cost is still above
    the target (``lo`` where none was tried): a coarse knob (whole heads, whole tokens) can jump past the target,
    and a finer step after it (a neuron trim) reaches the target exactly.

    ``cost`` falls from ``lo`` to ``hi``; it is ``None`` where the knob goes past what the method can do (counted as
    past the target, never an answer: ``beyond`` says what the method can do instead). The errors, naming the
    method ``what``: a target at or above ``model``'s MACs (``dense`` where ``cost`` counts otherwise than
    :func:`~vitprune.measure.count_macs`; :func:`goal`), and one below anything it reaches, an
    :class:`~vitprune.errors.UnreachableTargetError` with the nearest it reached. ``integer``, ``steps``, ``tol`` and
    ``guess``: as :func:`first` takes them."""
    wanted, _ = goal(target, model, dense)
    reached: dict[float, float] = {}

    def ok(knob: float) -> bool:
        macs = cost(knob)
        if macs is not None:
            reached[knob] = macs
        return macs is None or macs <= wanted

    found = first(ok, lo, hi, integer=integer, steps=steps, tol=tol, guess=guess)
    # Where the first knob that passes went past what the method can do, the answer is the passing knob nearest it.
    fits = [knob for knob, macs in reached.items() if macs <= wanted]
    if found is not None and fits:
        found = found if found in reached else min(fits, key=lambda knob: abs(knob - found))
        if not above:
            return found
        short = [knob for knob, macs in reached.items() if macs > wanted and (knob - found) * (hi - lo) < 0]
        return min(short, key=lambda knob: abs(knob - found), default=lo)
    nearest = min(reached.values(), default=None)
    raise UnreachableTargetError(
        f"{what} cannot reach {format_count(wanted)} MACs per image ({target.convention} convention)"
        + (f"; the nearest it reaches is {format_count(nearest)}" if nearest is not None else "")
        + (f"; {beyond}" if found is not None and beyond else ""))


__all__ = ["ON_TARGET", "SPELLING", "MacTarget", "dense_macs", "first", "goal", "reach", "resolve_shares"]
