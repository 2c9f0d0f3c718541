"""Recipes (base model + ordered edits) and portable, pickle-free saves."""

from vitprune.recipe.edits import apply_edit, register_edit, registered_edits, replay
from vitprune.recipe.io import (
    RECIPE_FILE, RUN_MODEL_DIR, WEIGHTS_FILE, build_base, check_state_dict, check_weights, load, read_document,
    register_base, save, saved_model_dir,
)
from vitprune.recipe.recipe import (
    RECIPE_FORMAT,
    RECIPE_VERSION,
    BaseModel,
    Edit,
    Recipe,
    get_recipe,
    require_recipe,
    set_recipe,
    track,
)

__all__ = [
    "RECIPE_FILE", "RECIPE_FORMAT", "RECIPE_VERSION", "RUN_MODEL_DIR", "WEIGHTS_FILE", "BaseModel", "Edit",
    "Recipe", "apply_edit", "build_base", "check_state_dict", "check_weights", "get_recipe", "load", "read_document",
    "register_base", "register_edit", "registered_edits", "replay", "require_recipe", "save", "saved_model_dir",
    "set_recipe", "track",
]
