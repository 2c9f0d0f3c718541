"""Packages whose torch-heavy modules load on first use (PEP 562), so that what needs only their configs (the
command line's options, ``vitprune --help``) starts without importing torch.

Pure standard library: any layer's package can use it.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any


class _LazyPackage(types.ModuleType):
    """A package with lazy names. The import system binds each submodule it loads on its package; a name the package
    gives from a module of the same name (hiap's ``extract`` function, from its module ``extract``) stays unbound
    until asked for, and is then the name, as an eager ``__init__`` would have left it."""

    def __setattr__(self, name: str, value: Any) -> None:
        if not (isinstance(value, types.ModuleType) and name in self.__dict__["_lazy_names"]):
            super().__setattr__(name, value)


def lazy_exports(package: str, exports: Mapping[str, tuple[str, ...]]) -> tuple[Callable[[str], Any],
                                                                                 Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, which gives the names ``exports`` lists under each module
    (``.name``: one of its own, as in a relative import). The first of them asked for imports all those modules and
    binds all their names, as an eager ``__init__`` would have: whatever registers itself on import (edits, model
    builders) is then registered."""
    module = sys.modules[package]
    namespace = module.__dict__
    owner = {name: source for source, names in exports.items() for name in names}
    namespace["_lazy_names"] = frozenset(owner)
    module.__class__ = _LazyPackage

    def __getattr__(name: str) -> Any:
        if name not in owner:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        loaded = {source: importlib.import_module(source, package) for source in exports}
        namespace.update({n: getattr(loaded[source], n) for source, names in exports.items() for n in names})
        return namespace[name]

    def __dir__() -> list[str]:
        return sorted({*namespace, *owner} - {"_lazy_names"})

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
