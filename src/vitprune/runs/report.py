"""What every method returns: a typed report whose fields are, in order, the keys of the ``report.json`` it writes
(or, for depth and width pruning, of the summary they save beside the model and print)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Protocol, TypeVar

from vitprune.config import JsonRecord
from vitprune.errors import VitpruneError

#: Where a pipeline writes its report in its run directory.
REPORT_FILE = "report.json"

R = TypeVar("R", bound="Report")


@dataclass
class Report(JsonRecord):
    """Base of the methods' reports: JSON form and back. Subclasses declare only their fields."""

    @property
    def saved_model(self) -> str:
        """The directory the run saved its model to: ``model_dir`` in a run directory, or ``out`` for an edit saved
        as one model directory."""
        return getattr(self, "model_dir", None) or getattr(self, "out")

    @classmethod
    def from_dict(cls: type[R], data: dict[str, Any]) -> R:
        """The report ``data`` holds (a :meth:`to_dict`, or a ``report.json`` read back); a key missing or unknown
        to this method's report is a one-line error."""
        names = [f.name for f in fields(cls)]
        missing, unknown = [n for n in names if n not in data], sorted(set(data) - set(names))
        if missing or unknown:
            raise VitpruneError(f"not a {cls.__name__}: " + "; ".join(
                f"{what} {', '.join(keys)}" for what, keys in (("missing", missing), ("unknown", unknown)) if keys))
        return cls(**data)


@dataclass
class RunReport(Report):
    """Base of the reports of methods that write a run directory: what every such run measured, before the method's
    own fields."""

    #: Validation top-1: ``dense``, and the result at the method's stages (``pruned``, ``finetuned``, ...).
    top1: dict[str, float | None]
    #: Params and MACs in both conventions (:meth:`~vitprune.measure.MacReport.totals`), of the starting model and of
    #: the result (a-STAR's: a mean over images, ``macs_averaged_over_images``).
    dense: dict[str, int]
    pruned: dict[str, Any]
    mac_conventions: dict[str, str]
    #: The result timed against the starting model (``None``: not measured).
    speed: dict[str, Any] | None
    #: Wall time per stage.
    seconds: dict[str, float]
    #: Where the model was saved: ``run_dir/model``.
    model_dir: str


class EditReport(Protocol):
    """What an edit saved as one model directory reports (depth and width pruning, a merge): where it saved the model,
    the timing, and its JSON form."""

    out: str
    speed: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]: ...
