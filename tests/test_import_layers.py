"""Layers import downward only, and no module imports itself back at import time (docs/development.md, "Layers").

Read from the source, not by importing: every ``import vitprune...`` statement counts, those inside functions
too (a lazy import that goes upward is still an upward dependency); ``if TYPE_CHECKING:`` blocks are left out of the
layers but not of the circles.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: Each top-level part of the package and its layer: a part imports only parts of lower layers (and itself).
#: ``training`` is the engine the methods call (fine-tuning after pruning): it knows no method.
LAYERS = {
    "errors": 0, "version": 0, "config": 0, "lazy": 0,
    **dict.fromkeys(("atomic", "device", "cache", "layers", "linear"), 1),
    **dict.fromkeys(("plotting", "data", "recipe", "adapters"), 2),
    **dict.fromkeys(("surgery", "measure", "export", "training"), 3),
    "consistency": 4, "models": 4, "dense": 4,
    "runs": 5,
    "methods": 6,
    "comparison": 7,
    "cli": 8, "vitprune": 8,  # "vitprune": the package's own __init__, the facade of the Python API
    "__main__": 9,
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted((SRC / "vitprune").rglob("*.py"))}


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(path: Path, *, top_level_only: bool, type_checking: bool = False) -> set[str]:
    """The vitprune modules ``path`` imports (``from vitprune.x import name`` counts as ``vitprune.x.name`` where
    that is a module, else as ``vitprune.x``); with ``type_checking``, those under ``if TYPE_CHECKING:`` too."""
    found: set[str] = set()

    def visit(node: ast.AST, top: bool) -> None:
        if _is_type_checking(node) and not type_checking:
            return
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in MODULES else node.module
                       for alias in node.names]
        found.update(t for t in targets if t.split(".")[0] == "vitprune")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and top_level_only:
            return
        for child in ast.iter_child_nodes(node):
            visit(child, top)

    visit(ast.parse(path.read_text()), True)
    return {name for name in found if name in MODULES}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "vitprune"


def test_every_part_has_a_layer():
    assert {_part(module) for module in MODULES} == set(LAYERS)


def test_the_development_guide_shows_this_table():
    """docs/development.md's "Layers" table: each part (its first name in backquotes per item) in its layer."""
    page = (SRC.parent / "docs" / "development.md").read_text()
    table = page[page.index("| layer | parts |"):].split("\n\n")[0]
    shown = {}
    for row in table.splitlines()[2:]:
        layer, parts = (cell.strip() for cell in row.strip("|").split("|"))
        for item in re.split(r",\s*(?![^()]*\))", parts):  # commas outside the brackets separate the parts
            shown[re.search(r"`([\w_]+)`", item).group(1)] = int(layer)
    assert shown == LAYERS


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_downward_only(module):
    mine = LAYERS[_part(module)]
    upward = sorted(imported for imported in _imports(MODULES[module], top_level_only=False)
                    if _part(imported) != _part(module) and LAYERS[_part(imported)] >= mine)
    assert not upward, f"{module} (layer {mine}) imports {upward}"


@pytest.mark.parametrize("top_level_only, type_checking", [(True, False), (False, True)],
                         ids=["at import", "at run time or under TYPE_CHECKING"])
def test_no_import_cycles(top_level_only, type_checking):
    """No circle at import time, nor through imports inside functions (run time) or for type checkers."""
    graph = {module: _imports(path, top_level_only=top_level_only, type_checking=type_checking) - {module}
             for module, path in MODULES.items()}
    cycles = _cycles(graph)
    assert not cycles, cycles


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            if component:
                found.append(sorted([node, *component]))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
