"""The arms of a comparison: every registered method that aims at a MAC target, the chains that fit, and why the
others are left out.

A method takes part through its :class:`~vitprune.runs.method.TargetSearch` part
(:meth:`~vitprune.runs.method.TargetSearch.target_steps` and :meth:`~vitprune.runs.method.TargetSearch.arm_steps`):
the chain steps that reach the target by its own rate search, then the recovery. Whether the model's family can have
those steps done to it is the adapter's to say (the chain's own check), so an arm is planned, *not applicable* (the
family lacks a capability: the adapter's reason) or *unreachable* at this target (the method says why). A planned
arm's steps carry the comparison's seed, so its chain file reproduces it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from vitprune.comparison.budget import CompareBudget
from vitprune.errors import UnreachableTargetError, UnsupportedArchitectureError, VitpruneError
from vitprune.measure import count_macs
from vitprune.measure.target import MacTarget
from vitprune.runs.chain import check_family
from vitprune.runs.method import TargetSearch, get_method, methods
from vitprune.runs.steps import parse_chain

#: Chains a comparison runs besides the single methods, by arm name: their methods in order, and their title. Each
#: step but the last removes the same share of what it is given as the last one does (the target's square root for
#: two), the last reaches the target.
CHAINS: dict[str, tuple[tuple[str, ...], str]] = {
    "hetdpt+": (("hetdpt", "width"), "HetDPT+ (HetDPT, then width pruning)"),
    "hetdpt+star": (("hetdpt", "star"), "HetDPT, then STAR"),
    # HetDPT's orthogonality claim (its App. B, Fig. 8): depth pruning, then token merging.
    "hetdpt+tome": (("hetdpt", "tome"), "HetDPT, then ToMe"),
}

#: An arm's status before it runs.
PLANNED, NOT_APPLICABLE, UNREACHABLE = "planned", "not applicable", "unreachable"


@dataclass
class Arm:
    """One arm at one target: its chain steps (recovery included), or why it has none."""

    name: str
    title: str
    status: str
    steps: list[dict[str, Any]] | None = None
    reason: str | None = None


def left_out() -> dict[str, str]:
    """The registered methods no comparison runs on their own, each with why."""
    return {name: f"{method.title} {method.no_target}" for name, method in methods().items()
            if not isinstance(method, TargetSearch)}


def arm_names() -> list[str]:
    """Every arm a comparison can run: the registered methods that aim at a target, then :data:`CHAINS`."""
    return [*(name for name, method in methods().items() if isinstance(method, TargetSearch)), *CHAINS]


def check_arms(names: list[str] | None) -> None:
    """One line naming an arm that :func:`arm_names` does not know."""
    unknown = sorted(set(names or ()) - set(arm_names()))
    if unknown:
        raise VitpruneError(f"unknown arm(s) {', '.join(unknown)}; known: {', '.join(arm_names())}")


def plan_arms(model: nn.Module, target: MacTarget, budget: CompareBudget, seed: int,
              only: list[str] | None = None) -> list[Arm]:
    """Every arm at ``target`` (``only``: those named), in :func:`arm_names`' order."""
    check_arms(only)
    dense = count_macs(model).macs
    return [plan_arm(model, name, target, budget, seed, dense_macs=dense) for name in arm_names()
            if only is None or name in only]


def plan_arm(model: nn.Module, name: str, target: MacTarget, budget: CompareBudget, seed: int, *,
             dense_macs: int | None = None) -> Arm:
    """Arm ``name`` at ``target`` (full convention, a share of ``model``'s MACs or a count), its steps seeded with
    ``seed``: a registered method's :meth:`~vitprune.runs.method.TargetSearch.arm_steps`, or a chain of
    :data:`CHAINS` whose every step but the last removes the same share of what it is given and the last reaches the
    target, then the recovery. Every step aims at an absolute count: a later step's input is not the dense model."""
    recovery = budget.recovery_settings(seed)
    dense = dense_macs if dense_macs is not None else count_macs(model).macs
    goal = target.of(dense)
    if name not in CHAINS:
        method = get_method(name)
        return _arm(model, name, method.title, seed, lambda: method.arm_steps(
            model, MacTarget.absolute(goal), budget.effort, recovery))
    chain, title = CHAINS[name]
    share = (goal / dense) ** (1 / len(chain))

    def steps() -> list[dict[str, Any]]:
        found = []
        for number, method in enumerate(chain, 1):
            last = number == len(chain)
            found += get_method(method).target_steps(
                model, MacTarget.absolute(goal if last else dense * share ** number), budget.effort, exact=last)
        return [*found, {"method": "finetune", **recovery}]
    return _arm(model, name, title, seed, steps)


def _arm(model: nn.Module, name: str, title: str, seed: int, steps: Any) -> Arm:
    """The arm whose steps ``steps()`` gives, seeded with ``seed`` and checked against the model's family before
    anything runs."""
    try:
        chain = parse_chain(steps(), seed=seed)
        check_family(model, chain.seeded_steps(), chain.configs())
    except UnsupportedArchitectureError as exc:
        return Arm(name, title, NOT_APPLICABLE, reason=str(exc))
    except UnreachableTargetError as exc:
        return Arm(name, title, UNREACHABLE, reason=str(exc))
    return Arm(name, title, PLANNED, steps=chain.to_dict()["steps"])


__all__ = ["CHAINS", "NOT_APPLICABLE", "PLANNED", "UNREACHABLE", "Arm", "arm_names", "check_arms", "left_out",
           "plan_arm", "plan_arms"]
