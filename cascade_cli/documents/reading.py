"""Reading a file's bytes and decoding them as text, with the one-line errors users see."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import BinaryIO

from cascade_cli.errors import InputError

SUPPORTED = "plain text, Markdown, source code, HTML, EPUB or PDF"


def head(path: Path, n: int = 1024) -> bytes:
    """The file's first `n` bytes (empty for an empty file), or an InputError saying why not."""
    return _read(path, n)


def open_file(path: Path) -> BinaryIO:
    """`path` opened for reading; an InputError for anything but a regular file, found without
    blocking (a FIFO opened the usual way waits for a writer forever — a file a directory walk
    listed can be swapped for one before it is read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError(f"{path} does not exist", "Check the file name.") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc}", "Check the file's permissions.") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise InputError(f"{path} is a directory", "Pass a file, or a folder to `ingest`.")
        raise InputError(f"{path} is not a regular file (a FIFO, socket or device)", "Pass a file.")
    return os.fdopen(fd, "rb")


def _read(path: Path, n: int | None) -> bytes:
    with open_file(path) as fh:
        try:
            return fh.read() if n is None else fh.read(n)
        except OSError as exc:
            raise InputError(
                f"cannot read {path}: {exc}", "Check the file's permissions."
            ) from None


def read_bytes(path: Path, limit: int | None = None) -> bytes:
    """The file's bytes (at most `limit`), or an InputError saying why not."""
    data = _read(path, None if limit is None else limit + 1)
    if limit is not None and len(data) > limit:
        raise InputError(
            f"{path} is larger than {limit // 2**20} MiB", "Split it into smaller files."
        )
    return data


def decode(path: Path, data: bytes, encoding: str) -> str:
    """`data` as text, or an InputError: binary (NUL bytes), wrongly encoded, or empty."""
    if b"\x00" in data:
        raise InputError(
            f"{path} looks like a binary file (it contains NUL bytes)",
            f"Pass {SUPPORTED} (convert other formats first, e.g. with pandoc or Calibre).",
        )
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path} is not valid {encoding} (byte {exc.start})",
            "Pass --encoding with the file's encoding, e.g. --encoding latin-1.",
        ) from None
    except LookupError:
        raise InputError(f"unknown encoding {encoding!r}", "Use e.g. utf-8 or latin-1.") from None
    if not text.strip():
        raise InputError(f"{path} is empty", "Pass a file with some text.")
    return text


def read_text(path: Path, encoding: str = "utf-8") -> tuple[str, str]:
    """The file's text and the sha256 of its bytes."""
    data = read_bytes(path)
    return decode(path, data, encoding), hashlib.sha256(data).hexdigest()
