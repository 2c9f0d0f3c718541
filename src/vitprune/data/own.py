"""What a model and a loader need of one of vitprune's own datasets (``digits``, ``cluttered-mnist``): tasks drawn
from images a Python package ships, so tests, demos and benchmarks need no download."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class OwnTask:
    """The shape, classes and normalisation of one of vitprune's own datasets."""

    #: (channels, height, width) of every image.
    input_size: tuple[int, int, int]
    num_classes: int
    #: Pixel mean and std of the training images in [0, 1], fixed so normalisation never drifts.
    mean: float
    std: float

    def normalise(self, pixels: torch.Tensor | float) -> torch.Tensor | float:
        """``pixels`` in [0, 1] as the model sees them."""
        return (pixels - self.mean) / self.std
