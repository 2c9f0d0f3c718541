"""What timm's staged families (ConvNeXt, Swin) share: blocks in stages of their own widths, no prefix tokens, one
pooled classifier head and timm's ``Mlp`` in every block."""

from __future__ import annotations

import torch
from timm.data import resolve_model_data_config
from torch import nn

from vitprune.adapters.base import DenseFeatures, ViTAdapter
from vitprune.adapters.channels import set_mlp_linears
from vitprune.adapters.timm_vit import TimmModel, set_mlp_activation


class TimmStagedAdapter(TimmModel, ViTAdapter, DenseFeatures):
    """A timm model whose blocks sit in ``<stages>.S.blocks.J`` and whose stream changes width between stages."""

    #: The model's attribute holding the stages (ConvNeXt's ``stages``, Swin's ``layers``).
    stages_attribute: str = ""

    def _blocks(self) -> list[tuple[str, nn.Module]]:
        stages = getattr(self.model, self.stages_attribute)
        return [(f"{self.stages_attribute}.{s}.blocks.{j}", block) for s, stage in enumerate(stages)
                for j, block in enumerate(stage.blocks)]

    def _block(self, index: int) -> tuple[str, nn.Module]:
        """Block ``index``'s path and module."""
        blocks = self._blocks()
        if not 0 <= index < len(blocks):
            raise IndexError(f"block {index} out of range: the model has {len(blocks)} blocks")
        return blocks[index]

    @property
    def num_prefix_tokens(self) -> int:
        return 0

    @property
    def input_size(self) -> tuple[int, int, int]:
        return tuple(resolve_model_data_config(self.model)["input_size"])

    def _check_size(self, height: int, width: int) -> None:
        """Refuse a size that the last stage's cells do not tile (each stage halves the grid)."""
        stride = self.model.feature_info[-1]["reduction"]
        if height % stride or width % stride:
            raise ValueError(f"{height}x{width} images are not tiled by the last stage's {stride}x{stride}-pixel cells")

    def _record_size(self, height: int, width: int) -> None:
        """The model's data config (what :attr:`input_size` reads, as timm's data pipeline does) says the new size."""
        self.model.pretrained_cfg = {**self.model.pretrained_cfg, "input_size": (self.input_size[0], height, width)}

    @property
    def num_features(self) -> int:
        return self.model.num_features

    @property
    def pools_class_token(self) -> bool:
        return False

    def pre_logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.forward_head(self.model.forward_features(x), pre_logits=True)

    def token_parameters(self) -> list[nn.Parameter]:
        return []

    def classifier_heads(self) -> list[nn.Module]:
        fc = getattr(self.model.head, "fc", None)
        return [fc] if isinstance(fc, nn.Linear) else []

    def set_num_classes(self, num_classes: int) -> None:
        self.model.reset_classifier(num_classes)

    def set_mlp(self, index: int, fc1: nn.Linear, fc2: nn.Linear | None) -> None:
        name, block = self._block(index)
        set_mlp_linears(block.mlp, f"{name}.mlp", fc1, fc2)

    def set_activation(self, index: int, act: nn.Module) -> None:
        name, block = self._block(index)
        set_mlp_activation(block.mlp, f"{name}.mlp", act)
