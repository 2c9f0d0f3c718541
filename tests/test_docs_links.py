"""Every relative link in the repository's Markdown (README, docs, benchmark pages, generated results pages) points
at a file or folder that exists, so a regenerated results folder or a renamed page cannot leave a dead link."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: ``[text](target)`` and ``![alt](target)``; the target ends at whitespace or the closing parenthesis.
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _markdown_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


def _dead_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # code holds no links
    text = re.sub(r"`[^`\n]*`", "", text)
    dead = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a web address or an anchor on the same page
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            dead.append(target)
    return dead


def test_markdown_files_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in _markdown_files()}
    assert {"README.md", "docs/measurement.md", "benchmarks/README.md"} <= names


@pytest.mark.parametrize("page", _markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    assert _dead_links(page) == []


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_contents_list_every_section():
    text = re.sub(r"```.*?```", "", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S)
    headings = re.findall(r"^(##|###) (.+)$", text, flags=re.M)
    expected = [f"{'  ' * (len(level) - 2)}- [{title}](#{_anchor(title)})" for level, title in headings
                if title != "Contents"]
    contents = text.split("## Contents\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert contents == expected


def test_no_page_points_at_the_papers_folder_a_user_does_not_have():
    """The papers are cited (README's Papers section, each method page), not referred to by a path of ours."""
    tracked = subprocess.run(["git", "ls-files", "README.md", "docs", "src", "pyproject.toml"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    assert [name for name in tracked if "shared/papers" in (ROOT / name).read_text(encoding="utf-8")] == []
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for title in ("Rethinking Depth Pruning for Vision Transformers", "Variance-Based Pruning for Accelerating",
                  "Synergistic Patch Pruning for Vision Transformer", "HiAP: A Multi-Granular Stochastic",
                  "BoundaryDPT: Pushing the Boundaries"):
        assert title in readme
