"""Model construction: timm names, vitprune's own models, Hugging Face models, checkpoints and saved directories."""

from vitprune.models.factory import create_model, original_model, resolve_model
from vitprune.models.family import load_checkpoint
from vitprune.models.hf import from_transformers
from vitprune.models.own import VITPRUNE_MODELS

__all__ = ["VITPRUNE_MODELS", "create_model", "from_transformers", "load_checkpoint", "original_model", "resolve_model"]
