"""The one content address of cascade's KV: what every derived key is made with.

A sink, a recurrent model's prefix snapshot, a quote note, a document chunk in the remote tier,
a server's prompt block: each is named by a digest of everything its KV depends on. They all
come from `address`: sha256 over the parts, joined by NUL bytes, full width (64 hex digits).
A part is bytes as they are, token ids (a list, tuple or integer array) as little-endian int32,
anything else as its text in UTF-8.
"""

from __future__ import annotations

import hashlib

import numpy as np

#: Hex digits of an address: sha256 in full.
WIDTH = 64


def _bytes(part: object) -> bytes:
    if isinstance(part, bytes | bytearray | memoryview):
        return bytes(part)
    if isinstance(part, list | tuple | np.ndarray):
        return np.asarray(part, dtype="<i4").tobytes()
    return str(part).encode()


def address(*parts: object) -> str:
    """The content address of `parts` (see the module's docstring)."""
    h = hashlib.sha256()
    for i, part in enumerate(parts):
        if i:
            h.update(b"\0")
        h.update(_bytes(part))
    return h.hexdigest()
