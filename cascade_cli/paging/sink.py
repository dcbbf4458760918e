"""The prompt prefix's KV ("attention sink"), stored once per prefix and restored like a chunk."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from cascade_cli.errors import StoreError
from cascade_cli.paging.library import Library
from cascade_cli.paging.window import Window
from cascade_cli.store import ChunkMeta

OWNER = "sink"


def sink_key(prefix: Sequence[int]) -> str:
    """Store key of a prefix's state (the store itself is per model fingerprint)."""
    digest = hashlib.sha256(np.asarray(prefix, dtype="<i4").tobytes()).hexdigest()[:20]
    return f"{OWNER}:{digest}"


def save_sink(
    lib: Library, win: Window, prefix: Sequence[int], scheme: str, force: bool = False
) -> None:
    """Queue the prefix's state (window positions 0..len-1) for saving, unless stored."""
    key = sink_key(prefix)
    if lib.disk.exists(key) and not force:
        return
    meta = ChunkMeta(
        key=key,
        owner=OWNER,
        index=0,
        start=0,
        end=len(prefix),
        tokens=np.asarray(prefix, dtype=np.int32),
        pos=0,
        scheme=scheme,
        pinned=True,
    )
    lib.pager.save(meta, win.save(0, len(prefix)))


def place_sink(lib: Library, win: Window, prefix: Sequence[int], scheme: str) -> str:
    """Put the prefix at the window's start: restored if stored, else decoded (and saved)."""
    key = sink_key(prefix)
    if lib.disk.exists(key) or lib.remote is not None:  # (the remote tier may hold it)
        warm = key in lib.ram
        try:
            state = lib.pager.get(key)
            if win.recurrent:  # a whole-state snapshot of the prefix (paging.prefix)
                win.restore(state, prefix)
            else:
                win.place(state)
            return lib.pager.origin(key) or ("ram" if warm else "disk")
        except StoreError:  # corrupt or unreadable: recompute instead of serving it
            win.reset()
    win.append(prefix)
    save_sink(lib, win, prefix, scheme, force=True)
    return "recomputed"
