"""The server's stored prompt blocks as a cache with a budget of their own.

Every request stores its new blocks, so without a bound the server's data grows for ever. A
block's cache entry is its chunk (an ``api:`` owner's), its row and its passages in the
conversation's recall index: when the ``api:`` chunks pass ``api_cache_budget`` bytes, blocks
go, least recently used first (never one the window holds now): rows and passages first
(committed), then chunks — a crash in between leaves chunks without rows, which `cascade rm
--api` and `cascade verify --repair` delete. Rows whose chunk is already gone (evicted by the
disk budget, or never saved beside another writer) go too, and a conversation left without rows
loses its recall tables. A block that comes back is decoded again (clients resend the whole
conversation) under a new key (block_index.add). Documents and sessions are never touched here, and
the store's own disk budget evicts ``api:`` chunks before theirs (store/budget.py).
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict

from cascade_cli.prompts import block_index
from cascade_cli.recall import tables as recall_index
from cascade_cli.store import SNAP, DiskStore

PATTERN = block_index.PREFIX + "*"


def _forget_rows(conn: sqlite3.Connection, blocks: list[tuple[str, int]]) -> None:
    """Drop block rows [(owner, idx)] and their passages; a conversation left without rows
    loses its recall index. Caller commits."""
    by_owner: dict[str, list[int]] = defaultdict(list)
    for owner, idx in blocks:
        by_owner[owner].append(idx)
    for owner, idxs in by_owner.items():
        if block_index.has_table(conn):
            conn.executemany(
                "DELETE FROM api_blocks WHERE owner = ? AND idx = ?", [(owner, i) for i in idxs]
            )
            left = conn.execute("SELECT 1 FROM api_blocks WHERE owner = ? LIMIT 1", (owner,))
            if left.fetchone() is None:
                recall_index.forget(conn, owner)
                continue
        recall_index.drop_chunks(conn, owner, idxs)


def _split(key: str) -> tuple[str, int]:
    owner, _, idx = key.rpartition(":")
    return owner, int(idx)


#: Once over budget, blocks are removed down to this share of it: the blocks saved before the
#: next check (the server trims every few requests and when idle) then fit under the budget.
LOW_WATER = 0.75


def trim(disk: DiskStore, budget: int, keep: set[str]) -> tuple[list[str], int]:
    """Remove least recently used blocks (never a key in `keep`) when the ``api:`` chunks take
    more than `budget` bytes, down to LOW_WATER of it, and rows whose chunk is gone; (keys
    removed, bytes freed)."""
    with disk.lock:
        conn = disk.conn
        chunks = conn.execute(
            "SELECT key, nbytes FROM chunks WHERE owner GLOB ? ORDER BY accessed, created",
            (PATTERN,),
        ).fetchall()
        stale: list[tuple[str, int]] = []
        if block_index.has_table(conn):
            stale = conn.execute(
                "SELECT owner, idx FROM api_blocks b WHERE NOT EXISTS (SELECT 1 FROM chunks c "
                "WHERE c.key = b.owner || ':' || b.idx)"
            ).fetchall()
    victims = _oldest(chunks, budget, keep)
    gone = [(o, i) for o, i in stale if f"{o}:{i}" not in keep]
    if not victims and not gone:
        return [], 0
    with disk.transaction() as conn:
        _forget_rows(conn, [*gone, *(_split(k) for k in victims)])
    freed = sum(disk.delete(k) for k in victims)
    return [*victims, *(f"{o}:{i}" for o, i in gone)], freed


def trim_snapshots(disk: DiskStore, budget: int) -> tuple[list[str], int]:
    """A recurrent model's server stores prefix snapshots (``snap:api:``), not block states:
    the least recently used go once they take more than `budget` bytes, down to LOW_WATER of
    it; the block rows stay (their recall passages). (keys removed, bytes freed)."""
    with disk.lock:
        chunks = disk.conn.execute(
            "SELECT key, nbytes FROM chunks WHERE owner GLOB ? ORDER BY accessed, created",
            (SNAP + PATTERN,),
        ).fetchall()
    victims = _oldest(chunks, budget, set())
    return victims, sum(disk.delete(k) for k in victims)


def _oldest(chunks: list[tuple[str, int]], budget: int, keep: set[str]) -> list[str]:
    """Keys to remove, least recently used first (`chunks`: (key, bytes) in that order), once
    they take more than `budget` bytes: down to LOW_WATER of it, never a key in `keep`."""
    total = sum(int(n) for _, n in chunks)
    target = budget if total <= budget else int(budget * LOW_WATER)
    victims: list[str] = []
    for key, n in chunks:
        if total <= target:
            break
        if key not in keep:
            victims.append(key)
            total -= int(n)
    return victims


def orphans(disk: DiskStore) -> dict[str, int]:
    """``api:`` owners with chunks that no block row names (a removal cut short), and how
    many (`cascade verify`)."""
    with disk.lock:
        conn = disk.conn
        if not block_index.has_table(conn):
            query = "SELECT owner, COUNT(*) FROM chunks WHERE owner GLOB ? GROUP BY owner"
        else:
            query = (
                "SELECT c.owner, COUNT(*) FROM chunks c WHERE c.owner GLOB ? AND NOT EXISTS "
                "(SELECT 1 FROM api_blocks b WHERE b.owner = c.owner "
                "AND c.key = b.owner || ':' || b.idx) GROUP BY c.owner"
            )
        return {owner: int(n) for owner, n in conn.execute(query, (PATTERN,))}


def clear(disk: DiskStore) -> tuple[int, int]:
    """Remove every conversation the server stored (`cascade rm --api`): (owners, bytes)."""
    with disk.lock:
        owners = set(block_index.owner_rows(disk.conn))
    stored = disk.owners()
    owners |= {o for o in stored if o.startswith(block_index.PREFIX)}
    owners |= {o[len(SNAP) :] for o in stored if o.startswith(SNAP + block_index.PREFIX)}
    freed = 0
    for owner in sorted(owners):
        with disk.transaction() as conn:
            block_index.forget(conn, owner)
            recall_index.forget(conn, owner)
        freed += disk.delete_owner(owner) + disk.delete_owner(SNAP + owner)
    return len(owners), freed
