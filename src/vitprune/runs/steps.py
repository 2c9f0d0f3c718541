"""A chain as a config, without torch: its steps and what they share (:class:`ChainConfig`), read from a chain file
and checked against each method before anything runs.

A chain file is a list of steps, each ``{"method": NAME, ...settings}`` (any method with a
:class:`~vitprune.runs.method.ChainStep` part; its settings are the method's own), or a document that also says what
the steps share::

    {"seed": 1, "train_images": 2000, "preset": "digits", "steps": [{"method": "vbp", "target_macs": 0.6}, ...]}
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitprune.atomic import parse_json
from vitprune.errors import VitpruneError
from vitprune.runs.method import get_method, step_methods

#: What a chain document may say besides its steps (:class:`ChainConfig`'s fields of the same names).
DOCUMENT_KEYS = ("seed", "train_images", "preset")


@dataclass
class Step:
    """One step of a chain: a method and its settings."""

    method: str
    settings: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The chain-file form: ``{"method": ..., **settings}``."""
        return {"method": self.method, **self.settings}


@dataclass
class ChainConfig:
    """A chain: its steps in order, and what they share. The run's own seed and data make a chain reproducible: its
    file (:meth:`to_dict`) run again gives the same model."""

    steps: list[Step]
    #: The seed of every step whose method takes one (:attr:`~vitprune.runs.method.ChainStep.seeded`) and whose
    #: settings name none, and of the training subset (``None``: each step keeps its own default).
    seed: int | None = None
    #: The class-balanced training images every step trains on, drawn with :attr:`seed` (``None``: all of them).
    train_images: int | None = None
    #: HetDPT's preset for the ``hetdpt`` steps that name none.
    preset: str = "imagenet"
    #: Check that the final model exports to ONNX (with its other checks).
    onnx: bool = True

    def seeded_steps(self) -> list[Step]:
        """The steps as they run: :attr:`seed` in each step that takes one and names none."""
        if self.seed is None:
            return list(self.steps)
        known = step_methods()
        return [Step(step.method, {"seed": self.seed, **step.settings})
                if step.method in known and known[step.method].seeded else step for step in self.steps]

    def configs(self) -> list[Any]:
        """Every step's config (:func:`check_chain`)."""
        return check_chain(self.seeded_steps(), self.preset)

    def validate(self) -> None:
        """Every step's settings read by its method, and the shared settings sound; one line where not."""
        if self.train_images is not None and (isinstance(self.train_images, bool)
                                              or not isinstance(self.train_images, int) or self.train_images < 1):
            raise VitpruneError(f"train_images (training images every step trains on) must be a whole number of at "
                                f"least 1, got {self.train_images!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise VitpruneError(f"a chain's seed must be a whole number, got {self.seed!r}")
        self.configs()

    def to_dict(self) -> dict[str, Any]:
        """The chain-file form of the chain as it runs: what the steps share, and each step with its seed."""
        return {"seed": self.seed, "train_images": self.train_images, "preset": self.preset,
                "steps": [step.to_dict() for step in self.seeded_steps()]}


def parse_chain(document: Any, **defaults: Any) -> ChainConfig:
    """The chain a chain document describes: a list of step objects, or ``{"steps": [...]}`` with what they share
    (:data:`DOCUMENT_KEYS`); ``defaults`` (:class:`ChainConfig`'s fields) fill what the document does not say. Every
    step's settings are checked against its method before anything runs."""
    items = document.get("steps") if isinstance(document, dict) else document
    if not isinstance(items, list) or not items:
        raise VitpruneError('a chain is a non-empty list of steps such as [{"method": "depth", "attention": [0]}], '
                            'or {"steps": [...]}')
    shared = {}
    if isinstance(document, dict):
        unknown = sorted(set(document) - {"steps", *DOCUMENT_KEYS})
        if unknown:
            raise VitpruneError(f"a chain document says {', '.join(unknown)}, which it cannot (it may say steps, "
                                f"{', '.join(DOCUMENT_KEYS)})")
        shared = {key: document[key] for key in DOCUMENT_KEYS if document.get(key) is not None}
    steps = []
    known = step_methods()
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict) or item.get("method") not in known:
            raise VitpruneError(f"step {number}: each step needs a method, one of: {', '.join(known)}")
        steps.append(Step(item["method"], {k: v for k, v in item.items() if k != "method"}))
    config = ChainConfig(steps, **{**defaults, **shared})
    config.validate()
    return config


def check_chain(steps: list[Step], preset: str = "imagenet") -> list[Any]:
    """Every step's settings read by its method (``preset``: HetDPT's default preset), before anything runs; a
    setting a method rejects is one line naming the step."""
    configs = []
    for number, step in enumerate(steps, 1):
        try:
            method = get_method(step.method)
            if step.method not in step_methods():
                raise VitpruneError(f"{method.title} is not a step of chains")
            configs.append(method.configure(step.settings, preset))
        except VitpruneError as exc:
            raise VitpruneError(f"step {number}: {exc}") from None
    return configs


def load_chain(path: str | Path, **defaults: Any) -> ChainConfig:
    """:func:`parse_chain` of a JSON chain file (``defaults``: what the file does not say)."""
    path = Path(path)
    if not path.is_file():
        raise VitpruneError(f"chain file {path} does not exist")
    return parse_chain(parse_json(path, "chain file"), **defaults)


def describe_steps() -> dict[str, str]:
    """The methods a step can name, each with what its settings are."""
    return {name: method.settings_help() for name, method in step_methods().items()}


__all__ = ["DOCUMENT_KEYS", "ChainConfig", "Step", "check_chain", "describe_steps", "load_chain", "parse_chain"]
