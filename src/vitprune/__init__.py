"""vitprune: turn a trained vision transformer into a physically smaller, measurably faster one."""

from vitprune.version import __version__  # noqa: E402
from vitprune import surgery  # noqa: E402,F401  (registers the edits that recipes replay)
from vitprune.adapters import get_adapter  # noqa: E402
from vitprune.errors import VitpruneError  # noqa: E402
from vitprune.models import create_model, from_transformers, resolve_model  # noqa: E402
from vitprune.recipe import apply_edit, get_recipe, load, save, track  # noqa: E402

__all__ = [
    "VitpruneError", "__version__", "apply_edit", "create_model", "from_transformers", "get_adapter", "get_recipe",
    "load", "resolve_model", "save", "track",
]
