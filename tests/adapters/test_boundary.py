"""The adapter boundary: outside ``adapters/`` and the model factory (``models/``), no module imports a family's
classes or reads an attribute name only a family has (each adapter declares both).

Read from the source. Names a family shares with the views (``blocks``, ``attn``, ``qkv``, ``mlp``, ``fc1``, ...)
cannot be told apart by reading; methods reach blocks through the views, whose own tests pin what they show.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from vitprune.adapters import ADAPTERS

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "vitprune"
ALLOWED = ("adapters", "models")
MODULES = {str(path.relative_to(PACKAGE)): path for path in sorted(PACKAGE.rglob("*.py"))
           if path.relative_to(PACKAGE).parts[0] not in ALLOWED}
FAMILY_MODULES = tuple(module for adapter in ADAPTERS for module in adapter.family_modules)
FAMILY_ATTRIBUTES = frozenset().union(*(adapter.family_attributes for adapter in ADAPTERS))
#: Detectors a pruned backbone goes under (``dense/``), from a library that also holds a family: heads, not a
#: family's classes (the ResNet config builds the detector's stand-in backbone, which the pruned one replaces).
HEAD_MODULES = ("transformers.models.deformable_detr", "transformers.models.resnet")


def crossings(path: Path) -> list[str]:
    """Where ``path`` imports a family module or reads a family attribute: ``"line: what"``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found += [f"{node.lineno}: import {name}" for name in names
                  if _under(name, FAMILY_MODULES) and not _under(name, HEAD_MODULES)][:1]
        if isinstance(node, ast.Attribute) and node.attr in FAMILY_ATTRIBUTES:
            found.append(f"{node.lineno}: .{node.attr}")
    return found


def _under(name: str, modules: tuple[str, ...]) -> bool:
    return any(name == m or name.startswith(m + ".") for m in modules)


def test_every_adapter_declares_its_family():
    assert all(adapter.family_modules and adapter.family_attributes for adapter in ADAPTERS)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_nothing_outside_the_adapters_crosses_into_a_family(module):
    assert not crossings(MODULES[module]), f"{module}: {crossings(MODULES[module])}"


def test_a_crossing_is_found(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from timm.models.vision_transformer import Block\n\ndef f(model):\n"
                     "    return model.patch_embed\n"
                     "from transformers.models.deformable_detr import DeformableDetrConfig\n"
                     "from transformers.models.vit import ViTModel\n")
    assert sorted(crossings(probe)) == ["1: import timm.models.vision_transformer", "4: .patch_embed",
                                        "6: import transformers.models.vit"]
