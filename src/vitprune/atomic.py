"""Write a file or directory under a temporary name and rename it into place only when it is complete."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vitprune.errors import VitpruneError


@contextmanager
def atomic_directory(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh temporary sibling of ``target``; on success it replaces ``target``, on any error it is removed.

    A previous ``target`` stays intact until the new one is complete, so an interrupted writer never
    leaves a half-written directory under the real name.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def atomic_file(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling path of ``target`` to write; on success it replaces ``target``, on error it goes.

    A reader never sees a half-written file under the real name (the file counterpart of
    :func:`vitprune.atomic.atomic_directory`).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Not mkstemp: its file is private (0600), and the result should get the umask's permissions like any other.
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(target: str | os.PathLike, data: Any) -> Path:
    """Write ``data`` as indented JSON to ``target`` through :func:`atomic_file`; returns the path."""
    with atomic_file(target) as tmp:
        tmp.write_text(json.dumps(data, indent=2) + "\n")
    return Path(target)


def read_json(source: str | os.PathLike) -> Any:
    """Read back a JSON file a run wrote; an unreadable one is a one-line error that says how to recover."""
    try:
        return json.loads(Path(source).read_text())
    except (OSError, ValueError) as exc:
        raise VitpruneError(f"cannot read {source}: {exc}; delete it to recompute that stage") from None
