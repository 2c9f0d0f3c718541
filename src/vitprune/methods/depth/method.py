"""Depth pruning by hand as a registered method: ``vitprune prune depth`` and the chain's ``depth`` step."""

from __future__ import annotations

from typing import Any

from vitprune.methods.depth.config import DepthConfig
from vitprune.runs.method import ChainStep, CommandLine, Method


class Depth(Method, CommandLine, ChainStep):
    name = "depth"
    title = "depth pruning"
    config = DepthConfig
    data = ()
    out_is_model = True
    no_target = "removes the layers it is given; HetDPT's arm chooses them"
    help = "Remove attention sublayers and MLP activations (HetDPT/BoundaryDPT depth pruning); show before/after."
    seeded = False
    summary = ("attention", "activation", "identity", "fold_norm", "output_gelu")
    settings = "DepthConfig's fields: attention, activation (block indices), identity, fold_norm, output_gelu"

    def title_of(self, report: Any) -> str:
        return (f"attention removed in blocks {report.attention or 'none'}, activation in "
                f"{report.activation or 'none'} (identity '{report.identity}')")
