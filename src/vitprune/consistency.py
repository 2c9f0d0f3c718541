"""Checks that a pruned model (after any chain of methods) is still what vitprune says it is.

* its MAC count equals what torch's ``FlopCounterMode`` sees running it with attention on the math backend (plus
  the documented value padding), whatever fused attention kernels the installed torch can count;
* it saves and loads back to identical outputs;
* its recipe, replayed on a fresh base model, rebuilds the same architecture;
* where its structure is static, it exports to ONNX and onnxruntime gives the same outputs.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.export import dynamic_structure, export_onnx, onnx_missing
from vitprune.measure import FLOP_COUNTER_REFERENCE, count_macs, flop_counter_macs, value_padding_macs
from vitprune.recipe import build_base
from vitprune.recipe import get_recipe, load, save
from vitprune.recipe.edits import replay


#: How far onnxruntime's outputs may lie from PyTorch's.
ONNX_TOLERANCE = 1e-4


@dataclass
class Consistency:
    """What :func:`check_consistency` found; :attr:`ok` says whether every check that ran passed."""

    macs_counted: int
    macs_padding: int
    macs_flop_counter: int
    round_trip_max_diff: float
    architecture_rebuilt: bool
    onnx_max_diff: float | None
    onnx_skipped: str | None
    #: What counted :attr:`macs_flop_counter`.
    flop_counter_reference: str = FLOP_COUNTER_REFERENCE

    @property
    def ok(self) -> bool:
        """MACs agree, the round trip is exact, the architecture rebuilds, and ONNX (if run) agrees to 1e-4."""
        return not failed_checks(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with :attr:`ok`."""
        found = asdict(self)
        return {**found, "ok": not failed_checks(found)}


def failed_checks(result: dict[str, Any]) -> list[str]:
    """The checks a :meth:`Consistency.to_dict` result failed, each named with what it found."""
    failed = []
    if result["macs_counted"] + result["macs_padding"] != result["macs_flop_counter"]:
        failed.append(f"MACs {result['macs_counted'] + result['macs_padding']:,} counted vs "
                      f"{result['macs_flop_counter']:,} by {result['flop_counter_reference']}")
    if result["round_trip_max_diff"] != 0.0:
        failed.append(f"save/load changes the outputs by up to {result['round_trip_max_diff']:.1e}")
    if not result["architecture_rebuilt"]:
        failed.append("the recipe does not rebuild the architecture")
    if result["onnx_max_diff"] is not None and result["onnx_max_diff"] > ONNX_TOLERANCE:
        failed.append(f"onnxruntime differs by up to {result['onnx_max_diff']:.1e}")
    return failed


def _structure(model: nn.Module) -> list[tuple[str, str, tuple[int, ...]]]:
    """Every module's type and every parameter's and buffer's shape, by name."""
    modules = [(name, type(m).__name__, ()) for name, m in model.named_modules()]
    tensors = [(name, "tensor", tuple(t.shape)) for name, t in [*model.named_parameters(), *model.named_buffers()]]
    return modules + tensors


def check_consistency(model: nn.Module, *, onnx: bool = True, directory: str | os.PathLike | None = None,
                      seed: int = 0) -> Consistency:
    """Run every check on ``model`` (CPU, eval mode) with one random image; files go to ``directory`` (default: a
    temporary one). ONNX is skipped, with the reason recorded, where the structure is dynamic or the ``onnx``
    extra is not installed."""
    model = model.eval()
    x = torch.randn(1, *get_adapter(model).input_size, generator=torch.Generator().manual_seed(seed))
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(directory) if directory is not None else Path(tmp)
        with torch.no_grad():
            expected = model(x)
            reference = flop_counter_macs(model, x)
            save(model, where / "model")
            loaded = load(where / "model")
            round_trip = (loaded(x) - expected).abs().max().item()
        fresh = build_base(get_recipe(model).base)
        replay(fresh, get_recipe(model).edits)
        skipped = (dynamic_structure(model) or onnx_missing()) if onnx else "not asked for"
        onnx_diff = None
        if skipped is None:  # any difference is recorded here, and judged by Consistency.ok
            onnx_diff = export_onnx(model, where / "model.onnx", atol=float("inf")).max_abs_diff
    return Consistency(
        macs_counted=count_macs(model, image=x[0]).macs, macs_padding=value_padding_macs(model, image=x[0]),
        macs_flop_counter=reference, round_trip_max_diff=round_trip,
        architecture_rebuilt=_structure(fresh) == _structure(model), onnx_max_diff=onnx_diff, onnx_skipped=skipped)
