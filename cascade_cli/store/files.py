"""Durable file helpers: fsync'd writes, directory fsync, and named crash points for tests."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

#: Environment variable naming a crash point, e.g. ``after_data_fsync`` or ``after_data_fsync:3``
#: (crash on the third time the point is reached). Tests only; unset in normal use.
CRASH_ENV = "CASCADE_STORE_CRASH"

_hits: dict[str, int] = {}


def crash_point(name: str) -> None:
    """Kill this process at ``name`` when CASCADE_STORE_CRASH asks for it (test hook)."""
    spec = os.environ.get(CRASH_ENV)
    if not spec:
        return
    point, _, nth = spec.partition(":")
    if point != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] >= (int(nth) if nth else 1):
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)  # pragma: no cover - SIGKILL does not return


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (creations, renames, unlinks) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dir(path: Path) -> None:
    """Create ``path`` (and parents) durably; a no-op if it exists."""
    if path.is_dir():
        return
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    path.mkdir(parents=True, exist_ok=True)
    for made in reversed(missing):
        fsync_dir(made.parent)


def write_durable(path: Path, data: bytes | bytearray | memoryview) -> None:
    """Write ``data`` to ``path`` via a temp file, fsync it, rename it in place, fsync the dir.

    A crash leaves either no file at ``path`` (plus a ``.tmp`` orphan) or the whole file.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            done += os.write(fd, view[done:])
        crash_point("after_tmp_write")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_exact(path: Path, size: int) -> bytes:
    """Read exactly ``size`` bytes; raise EOFError if the file is shorter or longer."""
    with path.open("rb", buffering=0) as fh:
        data = fh.readall() if size == 0 else _read_n(fh.fileno(), size + 1)
    if len(data) != size:
        raise EOFError(f"{path}: expected {size} bytes, found {len(data)}")
    return data


def _read_n(fd: int, n: int) -> bytes:
    """Up to ``n`` bytes (fewer only at end of file)."""
    first = os.read(fd, n)
    if len(first) == n or not first:
        return first
    parts = [first]
    got = len(first)
    while got < n:
        more = os.read(fd, n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def read_into(path: Path, out: memoryview) -> None:
    """Fill ``out`` exactly from ``path``; raise EOFError on any length mismatch."""
    with path.open("rb", buffering=0) as fh:
        got = 0
        while got < len(out):
            n = fh.readinto(out[got:])
            if not n:
                break
            got += n
        if got != len(out) or fh.read(1):
            raise EOFError(f"{path}: expected {len(out)} bytes")


def will_need(path: Path) -> None:
    """Ask the kernel to start reading `path` into the page cache now (no-op where unsupported
    or when the file is gone: the read that follows reports that)."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            advise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)
