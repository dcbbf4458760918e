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


register_migrations("prompts", [m001_blocks])


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
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'api_blocks'").fetchone()
    return found is not None


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
    """Insert rows for new blocks [(hash, owner)], numbering them per owner."""
    made: dict[str, Row] = {}
    nxt: dict[str, int] = {}
    for h, owner in items:
        if owner not in nxt:
            top = conn.execute(
                "SELECT COALESCE(MAX(idx) + 1, 0) FROM api_blocks WHERE owner = ?", (owner,)
            ).fetchone()[0]
            nxt[owner] = int(top)
        idx = nxt[owner]
        nxt[owner] += 1
        conn.execute("INSERT INTO api_blocks (hash, owner, idx) VALUES (?, ?, ?)", (h, owner, idx))
        made[h] = Row(h, owner, idx)
    return made
