"""SQL-level helpers of the disk tier: opening the index (lock, WAL, migrations, identity)
and converting records to and from rows."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import numpy as np

from cascade_cli.errors import FingerprintMismatchError, NotFoundError, StoreError
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


def connect(root: Path) -> sqlite3.Connection:
    """An autocommit connection to the index, usable from any thread."""
    try:
        conn = sqlite3.connect(
            root / INDEX, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        conn.execute("PRAGMA busy_timeout = 30000")
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open store index {root / INDEX}: {exc}", RM_FIX) from None
    return conn


def row_meta(row: tuple[Any, ...]) -> ChunkMeta:
    """A ChunkMeta from a row selected with COLUMNS."""
    k, o, i, s, e, toks, pos, scheme, pin, n, crc, ver, created, accessed, fp = row
    tokens = np.frombuffer(toks, dtype="<i4")
    return ChunkMeta(
        k, o, i, s, e, tokens, pos, scheme, bool(pin), n, crc, ver, created, accessed, fp
    )


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


def check_identity(
    conn: sqlite3.Connection, root: Path, fingerprint: str | None, *, write: bool
) -> str | None:
    """Compare (or, for a new store, record) the model fingerprint and format version."""
    meta = dict(conn.execute("SELECT key, value FROM store_meta").fetchall())
    version = int(meta.get("format_version", FORMAT_VERSION))
    if version > FORMAT_VERSION:
        raise StoreError(
            f"store {root} was written by a newer cascade (format {version})",
            "Upgrade cascade, or use another --disk-cache-path.",
        )
    stored = meta.get("fingerprint")
    if stored is None:
        if write and fingerprint:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT OR REPLACE INTO store_meta (key, value) VALUES "
                "('fingerprint', ?), ('format_version', ?), ('created', ?)",
                (fingerprint, str(FORMAT_VERSION), str(time.time())),
            )
            conn.execute("COMMIT")
        return fingerprint
    if fingerprint is not None and fingerprint != stored:
        raise FingerprintMismatchError(
            f"store {root} holds KV states made with another model or KV layout "
            f"({describe(stored, fingerprint)})",
            RM_FIX,
        )
    return stored


def open_writable(
    root: Path, fingerprint: str | None, timeout: float
) -> tuple[sqlite3.Connection, StoreLock, str | None]:
    """Create/lock/migrate the index at ``root``; returns (conn, lock, stored fingerprint)."""
    try:
        make_dir(root)
    except OSError as exc:
        raise StoreError(f"cannot create store {root}: {exc}", RM_FIX) from None
    lock = StoreLock.acquire(root / LOCK, timeout)
    conn: sqlite3.Connection | None = None
    try:
        new = not (root / INDEX).exists()
        conn = connect(root)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        migrate(conn)
        if new:
            fsync_dir(root)
        return conn, lock, check_identity(conn, root, fingerprint, write=True)
    except BaseException:
        if conn is not None:
            conn.close()
        lock.release()
        raise


def open_readonly(root: Path, fingerprint: str | None) -> tuple[sqlite3.Connection, str | None]:
    """Open the index without the lock and without writing; returns (conn, fingerprint)."""
    if not (root / INDEX).exists():
        raise NotFoundError(f"no store at {root}", "Check --disk-cache-path.")
    conn = connect(root)
    try:
        conn.execute("PRAGMA query_only = ON")
        if any(ns == "store" for ns, _ in pending(conn)):
            raise StoreError(
                f"store {root} uses an older layout", "Open it once read-write to upgrade it."
            )
        return conn, check_identity(conn, root, fingerprint, write=False)
    except BaseException:
        conn.close()
        raise
