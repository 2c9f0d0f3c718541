"""vitprune: turn a trained vision transformer into a physically smaller, measurably faster one."""

from vitprune.errors import VitpruneError
from vitprune.lazy import lazy_exports
from vitprune.version import __version__

# Loaded on first use: the command line imports this package to start, and its help needs no torch. Loading the
# models registers the base builders and the edits that a saved model's recipe replays.
__getattr__, __dir__ = lazy_exports(__name__, {
    ".adapters": ("get_adapter",),
    ".adapters.features": ("FeatureMaps", "intermediates"),
    ".comparison.config": ("CompareConfig",),
    ".comparison.run": ("compare",),
    ".measure.target": ("MacTarget",),
    ".models": ("create_model", "from_transformers", "resolve_model"),
    ".recipe": ("apply_edit", "get_recipe", "load", "save", "track"),
    ".runs.context": ("MethodData", "RunContext"),
})

__all__ = [
    "CompareConfig", "FeatureMaps", "MacTarget", "MethodData", "RunContext", "VitpruneError", "__version__",
    "apply_edit", "compare", "create_model", "from_transformers", "get_adapter", "get_recipe", "intermediates", "load",
    "resolve_model", "save", "track",
]
