"""A large vector stack kept in the store beside the index, so a new process maps it instead of
reading every passage's vector from SQLite again (~8 s for a 10,000-file collection).

One file per owner set: a magic line, the header's length, a JSON header (what the stack is
of, and each array's dtype, shape and offset), then the arrays, each at a 64-byte boundary.
Written to a temporary file and renamed over the old one; read back as read-only memory maps
after checking that the file is as long as its header says (a torn write is ignored and the
stack made again). A derived cache: deleting it costs one rebuild; the KEEP most recently used
stay (an owner set changes whenever one of its documents does: the old file is garbage).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

MAGIC = b"cascade-stack 1\n"
_ALIGN = 64
#: Stack files kept in a store (the most recently used).
KEEP = 4


def save(path: Path, meta: Mapping[str, Any], arrays: Mapping[str, npt.NDArray[Any]]) -> None:
    """Write the stack file (atomically: a temporary file renamed over `path`)."""
    layout: dict[str, list[Any]] = {}
    offset = 0
    for name, arr in arrays.items():
        layout[name] = [arr.dtype.str, list(arr.shape), offset]
        offset += -(-arr.nbytes // _ALIGN) * _ALIGN
    header = json.dumps({"meta": meta, "arrays": layout, "bytes": offset}).encode()
    start = -(-(len(MAGIC) + 8 + len(header)) // _ALIGN) * _ALIGN
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as fh:
            fh.write(MAGIC + struct.pack("<Q", len(header)) + header)
            for name, arr in arrays.items():
                fh.seek(start + layout[name][2])
                fh.write(np.ascontiguousarray(arr).tobytes())
            fh.truncate(start + offset)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    prune(path.parent)


def prune(folder: Path, keep: int = KEEP) -> None:
    """Delete all but the `keep` most recently used stack files of `folder`."""
    files = sorted(folder.glob("*.stack"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in files[keep:]:
        old.unlink(missing_ok=True)


def load(path: Path) -> tuple[dict[str, Any], dict[str, npt.NDArray[Any]]] | None:
    """(meta, arrays as read-only maps) of a stack file; None when there is none or it is not
    whole."""
    try:
        with path.open("rb") as fh:
            if fh.read(len(MAGIC)) != MAGIC:
                return None
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        start = -(-(len(MAGIC) + 8 + n) // _ALIGN) * _ALIGN
        if path.stat().st_size != start + int(header["bytes"]):
            return None
        os.utime(path)  # used: the last to go
        arrays = {}
        for name, (dtype, shape, offset) in header["arrays"].items():
            if int(np.prod(shape)) == 0:
                arrays[name] = np.zeros(shape, dtype=np.dtype(dtype))
                continue
            arrays[name] = np.memmap(
                path, dtype=np.dtype(dtype), mode="r", offset=start + offset, shape=tuple(shape)
            )
        return dict(header["meta"]), arrays
    except (OSError, ValueError, KeyError, struct.error):
        return None
