"""Turning a user's device string into a usable ``torch.device``."""

from __future__ import annotations

import torch

from vitprune.errors import VitpruneError


def resolve_device(device: str | torch.device) -> torch.device:
    """``device`` as a ``torch.device``; a clear error for unknown devices and for CUDA on a machine without it."""
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise VitpruneError(f"unknown device {str(device)!r} (use 'cpu' or 'cuda')") from None
    if dev.type not in ("cpu", "cuda"):
        raise VitpruneError(f"unsupported device {str(device)!r} (use 'cpu' or 'cuda')")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise VitpruneError(f"device {str(device)!r} requested but CUDA is not available on this machine")
    return dev
