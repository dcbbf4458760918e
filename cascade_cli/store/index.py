"""SQL-level helpers of the disk tier: opening the index (lock, WAL, migrations, identity)
and converting records to and from rows."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import numpy as np

from cascade_cli.errors import (
    CorruptChunkError,
    FingerprintMismatchError,
    NotFoundError,
    StaleStoreError,
    StoreError,
)
from cascade_cli.store.conn import LockedConnection
from cascade_cli.store.files import fsync_dir, make_dir
from cascade_cli.store.lock import StoreLock
from cascade_cli.store.records import ChunkMeta
from cascade_cli.store.schema import FORMAT_VERSION, migrate, pending

INDEX = "index.sqlite"
LOCK = "lock"
COLUMNS = (
    "key, owner, idx, tok_start, tok_end, tokens, pos, scheme, pinned, nbytes, checksum,"
    " version, created, accessed, fingerprint"
)
#: How to get past a store that belongs to another model.
RM_FIX = "Use another --disk-cache-path, or remove this store's contents with `cascade rm`."
#: How to get past a store whose KV states this build cannot load.
REBUILD_FIX = (
    "Rebuild it: `cascade rm` its documents and ingest them again (or use another "
    "--disk-cache-path)."
)
#: Fingerprint suffixes of stores made before the V layout was converted on decode.
_LEGACY_SUFFIXES = ("-flash-attn-on", "-flash-attn-off")
#: Layout requirements: store_meta key -> (value this build writes, *other values it reads).
Layout = dict[str, tuple[str, ...]]
_LABELS = {"llama_cpp": "llama.cpp", "payload_format": "KV payload format"}


def writable(root: Path) -> bool:
    """Whether this process may create files in the store (false on read-only media)."""
    return os.access(root, os.W_OK)


READ_ONLY_FIX = "Use a writable --disk-cache-path, or make this one writable; nothing was changed."


def connect(root: Path, *, immutable: bool = False) -> LockedConnection:
    """An autocommit connection to the index, usable from any thread (statements are
    serialised by its ``guard``). ``immutable``: for a store on read-only media, which no
    writer can change (SQLite then needs no lock or shared-memory file)."""
    if immutable:
        wal = root / (INDEX + "-wal")
        if wal.exists() and wal.stat().st_size:
            raise StoreError(
                f"store {root} is read-only and its last writer did not finish",
                "Make it writable once (any cascade command completes the write).",
            )
    try:
        target = f"file:{root / INDEX}?mode=ro&immutable=1" if immutable else str(root / INDEX)
        conn = sqlite3.connect(
            target,
            isolation_level=None,
            check_same_thread=False,
            timeout=30.0,
            factory=LockedConnection,
            uri=immutable,
        )
        conn.execute("PRAGMA busy_timeout = 30000")
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open store index {root / INDEX}: {exc}", RM_FIX) from None
    return conn


def row_meta(row: tuple[Any, ...]) -> ChunkMeta:
    """A ChunkMeta from a row selected with COLUMNS; CorruptChunkError for a malformed row."""
    k, o, i, s, e, toks, pos, scheme, pin, n, crc, ver, created, accessed, fp = row
    try:
        if not all(isinstance(v, int) for v in (i, s, e, pos, n, crc, ver)):
            raise TypeError("a numeric column holds another type")
        tokens = np.frombuffer(toks, dtype="<i4")
        if len(tokens) != e - s:
            raise ValueError(f"{len(tokens)} token ids for the range [{s}, {e})")
        return ChunkMeta(
            k, o, i, s, e, tokens, pos, scheme, bool(pin), n, crc, ver, created, accessed, fp
        )
    except (TypeError, ValueError) as exc:
        raise CorruptChunkError(
            f"the index row of chunk {k!r} is malformed ({exc})",
            "Run `cascade verify --repair`.",
        ) from None


def row_values(m: ChunkMeta) -> tuple[object, ...]:
    """Values for COLUMNS, in order."""
    return (
        m.key, m.owner, m.index, m.start, m.end, m.tokens.tobytes(), m.pos, m.scheme,
        int(m.pinned), m.nbytes, m.checksum, m.version, m.created, m.accessed, m.fingerprint,
    )  # fmt: skip


def describe(stored: str, loaded: str) -> str:
    """Name what differs between two fingerprints: the tails when they share a long prefix."""
    common = next((i for i, (a, b) in enumerate(zip(stored, loaded, strict=False)) if a != b), 0)
    common = stored.rfind("-", 0, common) + 1  # show whole dash-separated words
    if common >= 16:
        return f"stored …{stored[common:] or '-'}, loaded …{loaded[common:] or '-'}"
    return f"stored {stored}, loaded {loaded}"


def _legacy(fingerprint: str) -> str:
    for suffix in _LEGACY_SUFFIXES:
        if fingerprint.endswith(suffix):
            return fingerprint[: -len(suffix)]
    return fingerprint


def check_identity(
    conn: sqlite3.Connection,
    root: Path,
    fingerprint: str | None,
    *,
    write: bool,
    layout: Layout | None = None,
) -> str | None:
    """Compare (or, for a new store, record) the model fingerprint, the format version and the
    ``layout`` requirements (e.g. the llama.cpp version and the KV payload format)."""
    meta = dict(conn.execute("SELECT key, value FROM store_meta").fetchall())
    version = int(meta.get("format_version", FORMAT_VERSION))
    if version > FORMAT_VERSION:
        raise StoreError(
            f"store {root} was written by a newer cascade (format {version})",
            "Upgrade cascade, or use another --disk-cache-path.",
        )
    updates: dict[str, str] = {}
    stored = meta.get("fingerprint")
    if stored is None:
        if fingerprint:
            updates = {"fingerprint": fingerprint, "format_version": str(FORMAT_VERSION)}
            updates["created"] = str(time.time())
    elif fingerprint is not None and _legacy(fingerprint) != _legacy(stored):
        raise FingerprintMismatchError(
            f"store {root} holds KV states made with another model or KV layout "
            f"({describe(stored, fingerprint)})",
            RM_FIX,
        )
    for key, accepted in (layout or {}).items():
        have = meta.get(key)
        if have is not None and have not in accepted:
            raise StaleStoreError(
                f"store {root} was built with {_LABELS.get(key, key)} {have}; this cascade "
                f"uses {accepted[0]} and cannot load its KV states",
                REBUILD_FIX,
            )
        if have != accepted[0] and (stored is not None or fingerprint):
            updates[key] = accepted[0]  # a new store, or one this build now writes to
    if write and updates:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                "INSERT OR REPLACE INTO store_meta (key, value) VALUES (?, ?)",
                list(updates.items()),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return fingerprint if stored is None else stored


def open_index(
    root: Path,
    fingerprint: str | None,
    *,
    mode: str = "write",
    timeout: float = 5.0,
    layout: Layout | None = None,
) -> tuple[sqlite3.Connection, StoreLock | None, str | None]:
    """Open the index at ``root``; returns (conn, lock, stored fingerprint).

    ``write``: create the store if needed and take its exclusive lock (one writer at a time).
    ``shared``: no lock; the connection may write (counters, access times), so a reader such
    as ``ask`` works beside a running writer (SQLite WAL). ``readonly``: no lock, no writes
    (except applying a pending migration to a writable store an older release made).
    """
    if mode == "write":
        try:
            make_dir(root)
        except OSError as exc:
            raise StoreError(f"cannot create store {root}: {exc}", RM_FIX) from None
        if not writable(root):
            raise StoreError(f"store {root} is read-only", READ_ONLY_FIX)
        lock: StoreLock | None = StoreLock.acquire(root / LOCK, timeout)
    elif not (root / INDEX).exists():
        raise NotFoundError(f"no store at {root}", "Check --disk-cache-path.")
    else:
        lock = None
    conn: sqlite3.Connection | None = None
    try:
        new = not (root / INDEX).exists()
        conn = connect(root, immutable=mode == "readonly" and not writable(root))
        if mode == "readonly":
            if any(ns == "store" for ns, _ in pending(conn)):
                if not writable(root):
                    raise StoreError(
                        f"store {root} uses an older layout",
                        "Open it once read-write to upgrade it.",
                    )
                migrate(conn)  # a store a previous release wrote: upgraded once, in place
            conn.execute("PRAGMA query_only = ON")
        else:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            migrate(conn)
        if new:
            fsync_dir(root)
        write = mode != "readonly"
        return conn, lock, check_identity(conn, root, fingerprint, write=write, layout=layout)
    except BaseException:
        if conn is not None:
            conn.close()
        if lock is not None:
            lock.release()
        raise
