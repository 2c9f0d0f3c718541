"""Feature maps for detection and segmentation heads, the same call for every family and every pruned model.

timm's models give them through ``forward_intermediates``; vitprune's models keep that method where the family
has it, and :func:`intermediates` gives the same maps for all, token-pruned and Hugging Face models included.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from vitprune.adapters import get_adapter


def intermediates(model: nn.Module, images: torch.Tensor, indices: int | Sequence[int] | None = None, *,
                  norm: bool = False) -> list[torch.Tensor]:
    """The ``(B, C, H, W)`` feature maps of ``model`` for ``images`` after blocks (a staged family: stages)
    ``indices`` (:meth:`~vitprune.adapters.base.DenseFeatures.intermediates`)."""
    adapter = get_adapter(model, needs=("dense_features",), by="feature maps")
    return adapter.intermediates(images, indices, norm=norm)


class FeatureMaps(nn.Module):
    """``model`` as the backbone of a dense head: ``forward(images)`` returns its feature maps after blocks ``indices``
    (as timm's ``features_only`` models do). :attr:`channels` and :attr:`reductions` describe the maps, as a head
    needs them."""

    def __init__(self, model: nn.Module, indices: int | Sequence[int] | None = None, *, norm: bool = False) -> None:
        super().__init__()
        adapter = get_adapter(model, needs=("dense_features",), by="a dense-prediction backbone")
        self.model, self.indices, self.norm = model, indices, norm
        param = next(model.parameters())
        probe = torch.zeros(1, *adapter.input_size, device=param.device, dtype=param.dtype)
        was_training = model.training
        model.eval()
        with torch.no_grad():
            maps = self(probe)
        model.train(was_training)
        #: Channels of each map.
        self.channels = [m.shape[1] for m in maps]
        #: How many input pixels each map's cell spans (per side).
        self.reductions = [adapter.input_size[1] // m.shape[2] for m in maps]

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        return intermediates(self.model, images, self.indices, norm=self.norm)
