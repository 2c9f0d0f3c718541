"""Model construction: timm names, vitprune's own models, checkpoints and saved directories."""

from vitprune.models.factory import (
    VITPRUNE_MODELS,
    create_model,
    from_transformers,
    load_checkpoint,
    original_model,
    resolve_model,
)

__all__ = ["VITPRUNE_MODELS", "create_model", "from_transformers", "load_checkpoint", "original_model", "resolve_model"]
