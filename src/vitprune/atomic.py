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
    with _writing(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        try:
            yield tmp
            _follow_umask(tmp)
            if target.exists():
                old = target.with_name(f".{target.name}.old-{os.getpid()}")
                os.replace(target, old)
                os.replace(tmp, target)
                _remove(old)
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
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with _writing(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            yield tmp
            _follow_umask(tmp)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def _remove(tree: Path) -> None:
    """Delete a replaced directory, one its owner made read-only included (removing a file needs its directory
    writable)."""
    for directory in [tree, *(path for path in tree.rglob("*") if path.is_dir() and not path.is_symlink())]:
        try:
            directory.chmod(directory.stat().st_mode | 0o700)
        except OSError:
            pass  # not ours: rmtree leaves what it cannot remove
    shutil.rmtree(tree, ignore_errors=True)


@contextmanager
def _writing(target: Path) -> Iterator[None]:
    """Turn an OS error while writing ``target`` (permissions, a full disk) into one line naming it."""
    try:
        yield
    except OSError as exc:
        raise VitpruneError(f"could not write {target}: {exc.strerror or exc}") from None


def check_writable(target: str | os.PathLike, *, inside: bool = False) -> None:
    """Refuse in one line, before any work, a ``target`` this process cannot create or replace; with ``inside``
    (a run directory written into), one it cannot write into where it already exists."""
    target = Path(target)
    where = target if inside and target.is_dir() else target.parent
    while not where.exists() and where != where.parent:
        where = where.parent
    if not where.is_dir():
        raise VitpruneError(f"cannot write {target}: {where} is not a directory")
    try:  # a file made and removed: what permissions, ACLs and read-only mounts allow, as the write will find it
        with tempfile.TemporaryFile(dir=where):
            pass
    except OSError as exc:
        raise VitpruneError(f"cannot write {target}: {where} is not writable ({exc.strerror or exc})") from None


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it: put it straight back
    os.umask(mask)
    return mask


def _follow_umask(path: Path) -> None:
    """Give ``path`` (and, for a directory, everything under it) the permissions a plain ``mkdir`` or ``open`` would
    under the umask: ``mkdtemp`` makes directories private (0700) and safetensors its files (0600), so a model saved
    for others to use would otherwise be readable by its writer alone."""
    mask = _umask()
    paths = [path, *path.rglob("*")] if path.is_dir() else [path]
    for item in paths:
        item.chmod((0o777 if item.is_dir() else 0o666) & ~mask)


def write_json(target: str | os.PathLike, data: Any) -> Path:
    """Write ``data`` as indented JSON to ``target`` through :func:`atomic_file`; returns the path."""
    return write_text(target, json.dumps(data, indent=2) + "\n")


def write_text(target: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``target`` through :func:`atomic_file`; returns the path."""
    with atomic_file(target) as tmp:
        tmp.write_text(text)
    return Path(target)


def parse_json(path: Path, what: str, error: type[VitpruneError] = VitpruneError) -> Any:
    """The JSON document in ``path``, a file given to vitprune (``what`` names it); one that is not JSON is one line
    (an ``error``)."""
    try:
        return json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(f"{what} {path} is not valid JSON: {exc}") from None


def read_json(source: str | os.PathLike) -> Any:
    """Read back a JSON file a run wrote; an unreadable one is a one-line error that says how to recover."""
    try:
        return json.loads(Path(source).read_text())
    except (OSError, ValueError) as exc:
        raise VitpruneError(f"cannot read {source}: {exc}; delete it to recompute that stage") from None
