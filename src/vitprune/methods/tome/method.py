"""ToMe as a registered method: ``vitprune prune tome``, the chain's ``tome`` step and a ``vitprune compare`` arm."""

from __future__ import annotations

from typing import Any

from vitprune.measure.target import MacTarget
from vitprune.methods.tome.config import REQUIRES, ToMeConfig
from vitprune.runs.method import ChainStep, CommandLine, Method, Model, TargetSearch, get_method


class ToMe(Method, CommandLine, ChainStep, TargetSearch):
    name = "tome"
    title = "ToMe"
    config = ToMeConfig
    help = ("ToMe: merge the r most similar pairs of tokens in every block (bipartite soft matching on the keys, "
            "proportional attention); no training (recover with `vitprune finetune` or a chain's finetune step).")
    renderer = "vitprune.methods.tome.render:render_tome"
    summary = ("r", "merged")
    fixed = {"finetune": None}
    settings = "ToMeConfig's fields: r or target_macs (with above), inflect, proportional"

    def requires(self, config: ToMeConfig) -> tuple[str, ...]:
        return REQUIRES

    def defaults(self, settings: dict[str, Any]) -> dict[str, Any]:
        # r's default (8) gives way to a MAC target.
        return {"r": None} if "target_macs" in settings else {}

    def target_steps(self, model: Model, target: MacTarget, effort: str, *, exact: bool = True
                     ) -> list[dict[str, Any]]:
        """The smallest constant r at or below ``target``, or, with ``exact``, the largest above it and then VBP's
        neuron trim to the target (whole tokens move the MACs in steps)."""
        tome = {"method": self.name, "target_macs": target.to_json()}
        if not exact:
            return [tome]
        return [{**tome, "above": True}, *get_method("vbp").target_steps(model, target, effort)]
