"""ViTDet's simple feature pyramid: the multi-scale maps a plain ViT (one stride) needs under multi-scale detection
and segmentation heads, built from its last map alone (Li et al., "Exploring Plain Vision Transformer Backbones for
Object Detection", ECCV 2022, Fig. 2 and §3)."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch import nn
from torchvision.models.convnext import LayerNorm2d
from torchvision.ops.feature_pyramid_network import LastLevelMaxPool

from vitprune.adapters.features import FeatureMaps

#: ViTDet's scales of the last map: 1/4 and 1/8 of the input from a stride-16 ViT, the map itself, and 1/32.
SCALES = (4.0, 2.0, 1.0, 0.5)


class SimpleFeaturePyramid(nn.Module):
    """``model``'s feature map after block ``index``, up-sampled x4 (two stride-2 transposed convolutions with a
    channel LayerNorm and GELU between them) and x2 (one), kept (x1) and max-pooled (x1/2), each then projected to
    ``out_channels`` by a 1x1 and a 3x3 convolution, each followed by a channel LayerNorm, as ViTDet builds it.
    ``scales`` may name other powers of two (x8: three transposed convolutions, x1/4: a 4x4 max pool), which a
    backbone of another patch size needs to give the same strides.

    ``forward(images)`` returns an ordered dict ``"0"``, ``"1"``, ... (one per scale, finest first) and, with
    ``top_pool``, ``"pool"`` (a further stride-2 max pool of the coarsest, for the RPN, as torchvision's FPN
    backbones give): what torchvision's Faster R-CNN and Mask R-CNN take as a backbone, with :attr:`out_channels`.
    :attr:`strides` are the input pixels per cell of each map."""

    def __init__(self, model: nn.Module, out_channels: int = 256, *, index: int = -1,
                 scales: Sequence[float] = SCALES, norm: bool = False, top_pool: bool = True) -> None:
        super().__init__()
        self.maps = FeatureMaps(model, [index], norm=norm)
        dim, reduction = self.maps.channels[0], self.maps.reductions[0]
        self.levels = nn.ModuleList(_level(dim, scale, out_channels) for scale in scales)
        self.top = LastLevelMaxPool() if top_pool else None
        self.out_channels = out_channels
        self.strides = [reduction / scale for scale in scales] + ([2 * reduction / min(scales)] if top_pool else [])

    def forward(self, images: torch.Tensor) -> OrderedDict[str, torch.Tensor]:
        (features,) = self.maps(images)
        return self.from_map(features)

    def from_map(self, features: torch.Tensor) -> OrderedDict[str, torch.Tensor]:
        """The pyramid of the backbone's map ``features`` ``(B, C, H, W)`` computed elsewhere (e.g. cached, or by
        the backbone's last blocks from cached tokens): what :meth:`forward` returns for the images it came from."""
        maps = [level(features) for level in self.levels]
        names = [str(i) for i in range(len(maps))]
        if self.top is not None:
            maps, names = self.top(maps, maps, names)
        return OrderedDict(zip(names, maps))


def _level(dim: int, scale: float, out_channels: int) -> nn.Sequential:
    """One scale of the pyramid: the resampling ViTDet uses for ``scale`` (x4: two transposed convolutions with a
    LayerNorm and GELU between, x2: one, x1/2: a max pool), extended to any power of two (more of the same), then
    its two projections."""
    steps = math.log2(scale) if scale > 0 else math.nan
    if not steps.is_integer():
        raise ValueError(f"a pyramid's scales are powers of two (ViTDet's: {', '.join(map(str, SCALES))}), "
                         f"not {scale}")
    steps = int(steps)
    resample: list[nn.Module] = []
    channels = dim
    for step in range(steps):
        if step:
            resample += [LayerNorm2d(channels), nn.GELU()]
        # ViTDet halves the channels at each up-sampling; a width-pruned map's odd count rounds down.
        halved = max(1, channels // 2)
        resample.append(nn.ConvTranspose2d(channels, halved, 2, stride=2))
        channels = halved
    if steps < 0:
        resample.append(nn.MaxPool2d(2 ** -steps, stride=2 ** -steps))
    return nn.Sequential(*resample,
                         nn.Conv2d(channels, out_channels, 1, bias=False), LayerNorm2d(out_channels),
                         nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False), LayerNorm2d(out_channels))
