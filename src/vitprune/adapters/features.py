"""Feature maps for detection and segmentation heads, the same call for every family and every pruned model.

timm's models give them through ``forward_intermediates``; vitprune's models keep that method where the family
has it, and :func:`intermediates` gives the same maps for all, token-pruned and Hugging Face models included.
:class:`FeatureMaps` is the backbone module, with timm's ``features_only`` interface (``feature_info``, list or
ordered-dict output), so that necks and heads written for timm's backbones take it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch
from timm.models import FeatureInfo
from torch import nn

from vitprune.adapters import get_adapter

#: What :class:`FeatureMaps` returns: timm's ``features_only`` list, or the ordered dict of its ``FeatureDictNet``
#: (keyed by module name), which torchvision's ``FeaturePyramidNetwork`` takes.
OUTPUTS = ("list", "dict")


def intermediates(model: nn.Module, images: torch.Tensor, indices: int | Sequence[int] | None = None, *,
                  norm: bool = False) -> list[torch.Tensor]:
    """The ``(B, C, H, W)`` feature maps of ``model`` for ``images`` after blocks (a staged family: stages)
    ``indices`` (:meth:`~vitprune.adapters.base.DenseFeatures.intermediates`)."""
    adapter = get_adapter(model, needs=("dense_features",), by="feature maps")
    return adapter.intermediates(images, indices, norm=norm)


class FeatureMaps(nn.Module):
    """``model`` as the backbone of a dense head, as timm's ``features_only`` models are: ``forward(images)`` returns
    its feature maps after blocks (a staged family: stages) ``indices``, as a list or (``output="dict"``) an ordered
    dict keyed by the module each map comes from. :attr:`feature_info` is timm's ``FeatureInfo`` of the maps (their
    channels as the pruned model gives them, the input pixels per cell, their modules' names); :attr:`channels` and
    :attr:`reductions` are its first two as lists."""

    def __init__(self, model: nn.Module, indices: int | Sequence[int] | None = None, *, norm: bool = False,
                 output: str = "list") -> None:
        super().__init__()
        if output not in OUTPUTS:
            raise ValueError(f"unknown output {output!r} (choose from: {', '.join(OUTPUTS)})")
        adapter = get_adapter(model, needs=("dense_features",), by="a dense-prediction backbone")
        self.model, self.indices, self.norm, self.output = model, indices, norm, output
        param = next(model.parameters())
        probe = torch.zeros(1, *adapter.input_size, device=param.device, dtype=param.dtype)
        was_training = model.training
        model.eval()
        with torch.no_grad():
            maps = intermediates(model, probe, indices, norm=norm)
        model.train(was_training)
        #: Channels of each map.
        self.channels = [m.shape[1] for m in maps]
        #: How many input pixels each map's cell spans (per side).
        self.reductions = [adapter.input_size[1] // m.shape[2] for m in maps]
        names = adapter.feature_modules()
        self.feature_info = FeatureInfo(
            [{"num_chs": c, "reduction": r, "module": names[i]}
             for i, c, r in zip(_taken(len(names), indices), self.channels, self.reductions, strict=True)],
            out_indices=tuple(range(len(maps))))

    def forward(self, images: torch.Tensor) -> list[torch.Tensor] | OrderedDict[str, torch.Tensor]:
        maps = intermediates(self.model, images, self.indices, norm=self.norm)
        return OrderedDict(zip(self.feature_info.module_name(), maps)) if self.output == "dict" else maps


def _taken(count: int, indices: int | Sequence[int] | None) -> list[int]:
    """The positions (of ``count``) that ``indices`` names, in timm's convention."""
    if indices is None:
        return list(range(count))
    if isinstance(indices, int):
        return list(range(count - indices, count))
    return [i % count for i in indices]
