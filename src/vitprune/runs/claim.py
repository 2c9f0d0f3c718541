"""One writer per output: a process claims the directory a run writes (``--out``) before it looks at it, so a second
process aiming at the same place is refused in one line instead of both writing there.

A claim is an exclusive lock (``flock``) on ``.NAME.claim`` beside the output, holding the claimant's process id. The
kernel drops the lock when its process ends, however it ends, so a claim left by a process that died is recognised:
its file is there but nobody holds it, and the next run takes it over. Claims are per process and nest: a run that
claims a directory its own process already holds (a chain's steps, a resumed stage) goes on.
"""

from __future__ import annotations

import fcntl
import os
import socket
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from vitprune.atomic import check_writable
from vitprune.errors import VitpruneError, VitpruneWarning

#: The outputs this process holds, each with its lock's file descriptor and how many claims nest on it.
_HELD: dict[Path, list[int]] = {}


def claim_file(out: str | os.PathLike) -> Path:
    """Where the claim on ``out`` lives: ``.NAME.claim`` beside it (an output written under a temporary name and
    renamed, as a saved model is, cannot hold its own)."""
    out = Path(out)
    return out.parent / f".{out.name}.claim"


@contextmanager
def claimed(out: str | os.PathLike, log: Callable[[str], None] = lambda _m: None) -> Iterator[None]:
    """Hold ``out`` for this process while the block runs; another process holding it is a one-line
    :class:`~vitprune.errors.VitpruneError` naming it. A claim a dead process left is taken over (said through
    ``log``). Where the file system has no locks, the block runs unclaimed with a warning."""
    key = Path(os.path.abspath(out))
    if key in _HELD:
        _HELD[key][1] += 1
        try:
            yield
        finally:
            _HELD[key][1] -= 1
        return
    fd = _acquire(key, log)
    if fd is None:
        yield
        return
    _HELD[key] = [fd, 1]
    try:
        yield
    finally:
        del _HELD[key]
        claim_file(key).unlink(missing_ok=True)  # while still locked: the next claimant makes a fresh file
        os.close(fd)


def _acquire(out: Path, log: Callable[[str], None]) -> int | None:
    """The locked claim file's descriptor, the claimant's id written in it; ``None`` where locks are unsupported."""
    path = claim_file(out)
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            # A folder the run cannot write is the run's one-line refusal; one it can write beside an unwritable
            # parent (a directory made for it) runs unclaimed.
            check_writable(out, inside=True)
            if not out.is_dir():
                check_writable(out)
            warnings.warn(f"cannot claim {out} ({exc.strerror or exc}): a second run aiming at it would not be "
                          "stopped", VitpruneWarning, stacklevel=3)
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise VitpruneError(f"{out} is in use by another run ({holder}); wait for it to finish, or choose "
                                "another --out") from None
        except OSError as exc:
            os.close(fd)
            warnings.warn(f"cannot claim {out} ({exc.strerror or exc}): a second run aiming at it would not be "
                          "stopped", VitpruneWarning, stacklevel=3)
            return None
        # The holder we waited on may have removed the file it locked: then ours is not the claim, start again.
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    left = _holder(fd)
    if left:
        log(f"  taking over the claim on {out} left by {left}, which ended without releasing it")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"process {os.getpid()} on {socket.gethostname()}".encode(), 0)
    return fd


def _holder(fd: int) -> str:
    """Who the claim file says holds it (empty: a fresh file)."""
    return os.pread(fd, 256, 0).decode(errors="replace").strip()


__all__ = ["claim_file", "claimed"]
