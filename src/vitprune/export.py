"""ONNX export of a (pruned) model, checked against PyTorch with onnxruntime before it is kept.

torch's dynamo exporter traces the model; onnxruntime runs the file on random images and the
largest difference from PyTorch's outputs must stay within a tolerance, or the file is not
written. The batch dimension is dynamic by default. Token pruning (STAR) exports, because the
number of tokens each block keeps is fixed by the input size; a-STAR's per-image counts are not
static, so such a model is refused with the reason.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass

import torch
from torch import nn

from vitprune.config import JsonRecord
from vitprune.adapters import get_adapter
from vitprune.atomic import atomic_file
from vitprune.errors import VitpruneError

_INSTALL = "ONNX export needs the onnx extra: pip install 'vitprune[onnx]'"


def dynamic_structure(model: nn.Module) -> str | None:
    """Why ``model``'s structure depends on the image (so it cannot be exported), or ``None``."""
    for view in get_adapter(model).blocks():
        if view.token_op is not None and view.token_op.per_image:
            return f"{view.name} {view.token_op.per_image}"
    return None


@dataclass
class OnnxExport(JsonRecord):
    """What :func:`export_onnx` wrote and how well onnxruntime reproduces PyTorch on it."""

    path: str
    input_size: tuple[int, int, int]
    dynamic_batch: bool
    #: Largest absolute difference between onnxruntime's and PyTorch's outputs on ``check_batch`` random images.
    max_abs_diff: float
    check_batch: int
    onnxruntime: str


def onnx_missing() -> str | None:
    """Why ONNX export cannot run here (the onnx extra is not installed), or ``None``."""
    try:
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401  (the dynamo exporter needs it)
    except ImportError:
        return _INSTALL
    return None


def _runtime():
    if onnx_missing() is not None:
        raise VitpruneError(_INSTALL)
    import onnxruntime

    return onnxruntime


def export_onnx(model: nn.Module, path: str | os.PathLike, *, dynamic_batch: bool = True, check_batch: int = 2,
                atol: float = 1e-4, seed: int = 0) -> OnnxExport:
    """Export ``model`` (a copy, on CPU, in eval mode) to ONNX at ``path``, atomically.

    The file is kept only if onnxruntime's outputs on ``check_batch`` random images are within
    ``atol`` of PyTorch's; otherwise (and for a-STAR models) a :class:`VitpruneError` says why.
    """
    onnxruntime = _runtime()
    reason = dynamic_structure(model)
    if reason is not None:
        raise VitpruneError(f"cannot export to ONNX: {reason}; export the static STAR form instead")
    model = copy.deepcopy(model).cpu().eval()
    size = tuple(get_adapter(model).input_size)
    x = torch.randn(check_batch, *size, generator=torch.Generator().manual_seed(seed))
    dynamic = ({0: torch.export.Dim("batch", min=1, max=65536)},) if dynamic_batch else None
    with torch.no_grad():
        expected = model(x)
    with atomic_file(path) as tmp:
        torch.onnx.export(model, (x,), dynamo=True, verbose=False, dynamic_shapes=dynamic).save(str(tmp))
        diff = (OnnxRuntimeModel(tmp)(x) - expected).abs().max().item()
        if not diff <= atol:
            raise VitpruneError(f"onnxruntime's outputs differ from PyTorch's by {diff:.2e} (> {atol:.0e}); "
                                f"{path} was not written")
    return OnnxExport(path=str(path), input_size=size, dynamic_batch=dynamic_batch, max_abs_diff=diff,
                      check_batch=check_batch, onnxruntime=onnxruntime.__version__)


class OnnxRuntimeModel(nn.Module):
    """An ONNX file run by onnxruntime (CPU) behind ``nn.Module``'s call, so vitprune's speed tools time it like any
    model: ``compare_speed(OnnxRuntimeModel(a), OnnxRuntimeModel(b), input_size=...)``.

    ``threads`` sets onnxruntime's intra-op threads (default: its own choice, one per core).
    """

    def __init__(self, path: str | os.PathLike, threads: int | None = None) -> None:
        super().__init__()
        onnxruntime = _runtime()
        options = onnxruntime.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(self.session.run(None, {self.input_name: x.detach().cpu().numpy()})[0])
