"""The prompt prefix's KV ("attention sink"), stored once per prefix and restored like a chunk."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import numpy as np

from cascade_cli.documents.library import Library
from cascade_cli.engine.live import Window
from cascade_cli.errors import StoreError
from cascade_cli.store import ChunkMeta, register_migrations
from cascade_cli.store.address import address

OWNER = "sink"
#: Hex digits of a sink key's digest before the one content address (store.address).
_OLD_WIDTH = 20


def m001_full_width_keys(conn: sqlite3.Connection) -> None:
    """Sinks stored by releases before the one content address (sha256 of the token ids cut to
    20 hex digits) take their full-width key: the same digest, uncut, rebuilt from the token ids
    their rows hold; the states are untouched."""
    rows = conn.execute(
        "SELECT key, tokens FROM chunks WHERE owner = ? AND length(key) = ?",
        (OWNER, len(OWNER) + 1 + _OLD_WIDTH),
    ).fetchall()
    for key, tokens in rows:
        new = f"{OWNER}:{address(bytes(tokens))}"
        if new.startswith(key):  # the same digest: never rename a row it does not describe
            conn.execute("UPDATE chunks SET key = ? WHERE key = ?", (new, key))


register_migrations("sink", [m001_full_width_keys])


def sink_key(prefix: Sequence[int]) -> str:
    """Store key of a prefix's state (the store itself is per model fingerprint)."""
    return f"{OWNER}:{address(list(prefix))}"


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
            if win.recurrent:  # a whole-state snapshot of the prefix (window.prefix)
                win.restore(state, prefix)
            else:
                win.place(state)
            return lib.pager.tier(key, warm)
        except StoreError:  # corrupt or unreadable: recompute instead of serving it
            win.reset()
    win.append(prefix)
    save_sink(lib, win, prefix, scheme, force=True)
    return "recomputed"
