"""A pruned model as a segmentation_models_pytorch encoder, so that smp's decoders (``smp.Unet``, ``smp.FPN``,
``smp.Segformer``, ...) take it by name, as they take timm's models.

smp builds every encoder by name from its registry (``smp.encoders.encoders``); :func:`register_encoder` adds a
pruned model there, by the directory it was saved to (:func:`vitprune.save`) or as a module, which each smp model
then gets its own copy of. The weights are the pruned model's: build with ``encoder_weights=None``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vitprune.adapters import get_adapter
from vitprune.adapters.features import FeatureMaps
from vitprune.dense.pyramid import SimpleFeaturePyramid
from vitprune.recipe import load

#: The strides smp's decoders expect of an encoder's maps after the input itself: 2, 4, 8, 16, 32.
STRIDES = tuple(2 ** i for i in range(1, 6))


class PrunedEncoder(nn.Module):
    """``source`` (a pruned model, or the directory it was saved to) under smp's encoder interface: ``forward``
    returns the input and ``depth`` maps at strides 2, 4, ..., ``2**depth`` (:attr:`out_channels` each).

    A staged family (Swin, ConvNeXt) gives its own maps at strides 4 to 32, and an empty map at stride 2, as smp's
    timm encoders of these families do. With ``pixels`` the map at stride 2 is the images' own pixels instead, each
    2x2 block's as channels (``pixel_unshuffle``): where a CNN encoder's stem gives a U-Net's decoder its last skip
    (smp's ``Unet`` and ``UnetPlusPlus`` read it; ``FPN`` does not), a patch model has no layer at that resolution,
    and outlines finer than its cells come from the pixels.

    A plain ViT gives one stride; ViTDet's simple feature pyramid
    (:class:`~vitprune.dense.pyramid.SimpleFeaturePyramid`, ``pyramid_channels`` each) resamples its last map to
    strides 4 to 32, and to at most ``output_stride``, which is how a plain ViT keeps the resolution that smp's
    dilated encoders (DeepLabV3's stride 8 or 16) keep.

    With ``image_size`` the images smp passes are of that size and are resized (bilinear) to the backbone's own input
    size, as torchvision's detectors resize theirs: the strides are then counted in the images' pixels, which is
    how a ViT whose patches are no power of two (DINOv2's 14 px: 256-px images on a 224-px backbone's 16x16 cells)
    gets smp's strides."""

    _is_torch_scriptable = False
    _is_torch_exportable = True
    _is_torch_compilable = True

    def __init__(self, source: nn.Module | str | os.PathLike, *, depth: int = 5, output_stride: int = 32,
                 pyramid_channels: int = 256, norm: bool = False, image_size: int | Sequence[int] | None = None,
                 pixels: bool = False) -> None:
        super().__init__()
        if not 1 <= depth <= len(STRIDES):
            raise ValueError(f"an smp encoder's depth is 1 to {len(STRIDES)}, not {depth}")
        if output_stride not in (8, 16, 32):
            raise ValueError(f"an smp encoder's output stride is 8, 16 or 32, not {output_stride}")
        model = source if isinstance(source, nn.Module) else load(source)
        adapter = get_adapter(model, needs=("dense_features",), by="an smp encoder")
        self.name = f"vitprune-{adapter.family}"
        self._in_channels = adapter.input_size[0]
        self._depth = depth
        self._output_stride = output_stride
        self._backbone_size = tuple(adapter.input_size[1:])
        self._image_size = self._backbone_size if image_size is None else _pair(image_size)
        self._pixels = pixels
        second = 4 * self._in_channels if pixels else 0
        maps = FeatureMaps(model, norm=norm)
        strides = [self._stride(r) for r in maps.reductions]
        self._staged = len(set(maps.reductions)) > 1
        if self._staged:
            shown = ", ".join(f"{s:g}" for s in strides)
            if output_stride != 32:
                raise ValueError(f"{adapter.family} gives its own maps at strides {shown}: "
                                 f"they cannot be dilated to an output stride of {output_stride}")
            if strides != list(STRIDES[1:]):
                raise ValueError(f"{adapter.family} gives maps at strides {shown}; smp's decoders "
                                 f"take strides {', '.join(map(str, STRIDES[1:]))}")
            self.backbone: nn.Module = FeatureMaps(model, list(range(depth - 1)), norm=norm)
            self._out_channels = [self._in_channels, second] + maps.channels[:depth - 1]
        else:
            stride = strides[0]
            if not math.log2(stride).is_integer():
                cells = self._backbone_size[0] // maps.reductions[0]
                raise ValueError(f"a plain ViT's map of stride {stride:g} (its patch size on the images) cannot be "
                                 "resampled to smp's strides, which are powers of two: give image_size, the size "
                                 f"of the images it will take, e.g. {cells * 2 ** round(math.log2(stride))} "
                                 f"({cells} cells)")
            self.backbone = SimpleFeaturePyramid(
                model, pyramid_channels, scales=[stride / min(s, output_stride) for s in STRIDES[1:depth]],
                norm=norm, top_pool=False)
            self._out_channels = [self._in_channels, second] + [pyramid_channels] * (depth - 1)

    def _stride(self, reduction: int) -> float:
        """The images' pixels per cell of a map the backbone gives ``reduction`` of its own pixels per cell (square
        cells, or the image size is refused)."""
        strides = {image * reduction / own for image, own in zip(self._image_size, self._backbone_size)}
        if len(strides) > 1:
            raise ValueError(f"images of {self._image_size[0]}x{self._image_size[1]} give the backbone's "
                             f"{self._backbone_size[0]}x{self._backbone_size[1]} input cells that are not square")
        return strides.pop()

    @property
    def out_channels(self) -> list[int]:
        """Channels of each map ``forward`` returns, the input's first (0: the empty map at stride 2, without
        ``pixels``)."""
        return self._out_channels

    @property
    def output_stride(self) -> int:
        """The stride of the last map, which images' height and width must be multiples of."""
        return min(self._output_stride, 2 ** self._depth)

    def set_in_channels(self, in_channels: int, pretrained: bool = True) -> None:
        """smp's hook to change the input's channels: a pruned model keeps its own, and any other count is
        refused."""
        if in_channels != self._in_channels:
            raise ValueError(f"the pruned model takes {self._in_channels}-channel images, not {in_channels}: "
                             f"build the smp model with in_channels={self._in_channels}")

    def make_dilated(self, output_stride: int) -> None:
        """smp's hook to dilate the encoder, which it calls after building it with the same ``output_stride``."""
        if output_stride != self._output_stride:
            raise ValueError(f"this encoder was built for an output stride of {self._output_stride}, "
                             f"not {output_stride}")

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        _, _, height, width = images.shape
        if self._image_size != self._backbone_size:
            if (height, width) != self._image_size:
                raise ValueError(f"this encoder takes {self._image_size[0]}x{self._image_size[1]} images "
                                 f"(image_size), not {height}x{width}")
            taken = F.interpolate(images, size=self._backbone_size, mode="bilinear", align_corners=False)
        else:
            taken = images
        return self.encoded(images, self.backbone(taken))

    def encoded(self, images: torch.Tensor, maps: Sequence[torch.Tensor] | dict[str, torch.Tensor]
                ) -> list[torch.Tensor]:
        """What :meth:`forward` returns for ``images``, given :attr:`backbone`'s maps of them computed elsewhere
        (e.g. a plain ViT's pyramid from its last map, made from cached tokens)."""
        batch, _, height, width = images.shape
        second = (F.pixel_unshuffle(images, 2) if self._pixels else
                  images.new_empty(batch, 0, height // 2, width // 2))
        return [images, second, *(maps.values() if isinstance(maps, dict) else maps)]


def register_encoder(name: str, source: nn.Module | str | os.PathLike, **options: Any) -> None:
    """Add ``source`` (a pruned model or the directory it was saved to) to smp's encoders as ``name``, with
    :class:`PrunedEncoder`'s keyword ``options``; then ``smp.Unet(name, encoder_weights=None, in_channels=...)``
    and smp's other models build on it. A name smp already has is refused, unless it is one registered here."""
    encoders = _smp().encoders.encoders
    if name in encoders and encoders[name]["encoder"] is not PrunedEncoder:
        raise ValueError(f"smp already has an encoder named {name!r}")
    # smp deep-copies the params for each model it builds, so a module given here is copied, never shared.
    encoders[name] = {"encoder": PrunedEncoder, "params": {"source": source, **options}, "pretrained_settings": {}}


def _smp() -> Any:
    try:
        import segmentation_models_pytorch
    except ImportError as error:
        raise ImportError("smp encoders need segmentation-models-pytorch: pip install 'vitprune[dense]'") from error
    return segmentation_models_pytorch



def _pair(size: int | Sequence[int]) -> tuple[int, int]:
    height, width = (size, size) if isinstance(size, int) else size
    return int(height), int(width)
