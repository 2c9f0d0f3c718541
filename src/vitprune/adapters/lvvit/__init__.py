"""The LV-ViT family in one home: its model, a subclass of timm's ``VisionTransformer`` (:mod:`.model`), and its
adapter (:mod:`.adapter`)."""

from vitprune.adapters.lvvit.adapter import LVViTAdapter
from vitprune.adapters.lvvit.model import LVVIT_CONFIGS, LVViT, build_lvvit

__all__ = ["LVVIT_CONFIGS", "LVViT", "LVViTAdapter", "build_lvvit"]
