"""Stored prompt blocks: content address → (owner, index) of the chunk holding their KV.

A block's KV lives in the chunk store under ``api:<root>:<idx>``, where the root names the
conversation (the hash of its first block after the system prompt; a system prompt's own block
is its own root, so every conversation with that system prompt shares it). A block whose chunk
the disk budget evicted is decoded again from the request that names it (clients resend the
whole conversation). Branches of one conversation (a regenerated reply) share the root and get
their own indices.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from cascade_cli.store import register_migrations
from cascade_cli.store.schema import has_table as _has

PREFIX = "api:"


def m001_blocks(conn: sqlite3.Connection) -> None:
    """Prompt blocks by content address."""
    conn.execute(
        """CREATE TABLE api_blocks (
            hash TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            idx INTEGER NOT NULL,
            UNIQUE (owner, idx)
        )"""
    )


def m002_sequence(conn: sqlite3.Connection) -> None:
    """One sequence numbers every block, so that a chunk key is never used twice: a block of an
    evicted conversation comes back under a new key, never one the window or RAM still knows."""
    conn.execute("CREATE TABLE api_seq (next INTEGER NOT NULL)")
    conn.execute("INSERT INTO api_seq (next) SELECT COALESCE(MAX(idx) + 1, 0) FROM api_blocks")


register_migrations("prompts", [m001_blocks, m002_sequence])


@dataclass(frozen=True)
class Row:
    hash: str
    owner: str
    idx: int

    @property
    def key(self) -> str:
        return f"{self.owner}:{self.idx}"


def owner_for(root_hash: str) -> str:
    return PREFIX + root_hash[:24]


def has_table(conn: sqlite3.Connection) -> bool:
    return _has(conn, "api_blocks")


def lookup(conn: sqlite3.Connection, hashes: list[str]) -> dict[str, Row]:
    """The stored rows among `hashes`."""
    if not hashes or not has_table(conn):
        return {}
    found: dict[str, Row] = {}
    for o in range(0, len(hashes), 500):
        part = hashes[o : o + 500]
        marks = ",".join("?" * len(part))
        for h, owner, idx in conn.execute(
            f"SELECT hash, owner, idx FROM api_blocks WHERE hash IN ({marks})", part
        ):
            found[h] = Row(h, owner, idx)
    return found


def hash_of(conn: sqlite3.Connection, owner: str, idx: int) -> str | None:
    """The content address of the block stored as chunk ``owner:idx``, or None."""
    if not has_table(conn):
        return None
    row = conn.execute(
        "SELECT hash FROM api_blocks WHERE owner = ? AND idx = ?", (owner, idx)
    ).fetchone()
    return None if row is None else str(row[0])


def add(conn: sqlite3.Connection, items: list[tuple[str, str]]) -> dict[str, Row]:
    """Insert rows for new blocks [(hash, owner)], numbered from the store-wide sequence."""
    made: dict[str, Row] = {}
    if not items:
        return made
    idx = int(conn.execute("SELECT next FROM api_seq").fetchone()[0])
    for h, owner in items:
        conn.execute("INSERT INTO api_blocks (hash, owner, idx) VALUES (?, ?, ?)", (h, owner, idx))
        made[h] = Row(h, owner, idx)
        idx += 1
    conn.execute("UPDATE api_seq SET next = ?", (idx,))
    return made


def owner_rows(conn: sqlite3.Connection) -> dict[str, int]:
    """Every owner with block rows, and how many."""
    if not has_table(conn):
        return {}
    query = "SELECT owner, COUNT(*) FROM api_blocks GROUP BY owner"
    return {owner: int(n) for owner, n in conn.execute(query)}


def forget(conn: sqlite3.Connection, owner: str) -> None:
    """Drop an owner's block rows (its chunks are deleted after the caller commits)."""
    if has_table(conn):
        conn.execute("DELETE FROM api_blocks WHERE owner = ?", (owner,))
