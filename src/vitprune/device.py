"""Turning a user's device string into a usable ``torch.device``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vitprune.errors import VitpruneError

if TYPE_CHECKING:
    import torch


#: The device string that means CUDA where it is available, else the CPU.
AUTO = "auto"


def resolve_device(device: str | torch.device) -> torch.device:
    """``device`` as a ``torch.device`` (``"auto"``: CUDA if available, else CPU); a clear error for unknown devices
    and for CUDA on a machine without it."""
    import torch  # here, not at the top: the command line reads AUTO without importing torch

    if device == AUTO:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise VitpruneError(f"unknown device {str(device)!r} (use 'auto', 'cpu' or 'cuda')") from None
    if dev.type not in ("cpu", "cuda"):
        raise VitpruneError(f"unsupported device {str(device)!r} (use 'auto', 'cpu' or 'cuda')")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise VitpruneError(f"device {str(device)!r} requested but CUDA is not available on this machine")
    return dev
