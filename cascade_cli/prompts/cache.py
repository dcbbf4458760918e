"""The server's stored conversations as a cache with a budget of their own.

Every request stores its new blocks, so without a bound the server's data grows for ever. Its
chunks (``api:`` owners), their block rows and their recall index are one conversation's cache
entry: when the ``api:`` chunks pass ``api_cache_budget`` bytes, whole conversations go, least
recently used first (never one the window holds now): rows and recall index first (committed),
then chunks — a crash in between leaves chunks without rows, which `cascade rm --api` and
`cascade verify --repair` delete. A conversation that comes back is decoded again (clients
resend it whole). Documents and sessions are never touched here, and the store's own disk budget
evicts ``api:`` chunks before theirs (store/budget.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cascade_cli.prompts import catalog
from cascade_cli.recall import index as recall_index
from cascade_cli.store import DiskStore


@dataclass
class Entry:
    """One stored conversation (or shared system prompt): its owner, bytes and last use."""

    owner: str
    bytes: int = 0
    used: float = 0.0  # the last access of any of its chunks (0: none left)


def entries(disk: DiskStore) -> list[Entry]:
    """Every ``api:`` owner with chunks or block rows, least recently used first."""
    with disk.lock:
        conn = disk.conn
        found = {o: Entry(o) for o in catalog.owner_rows(conn)}
        query = (
            "SELECT owner, SUM(nbytes), MAX(accessed) FROM chunks WHERE owner GLOB ? GROUP BY owner"
        )
        for owner, nbytes, used in conn.execute(query, (catalog.PREFIX + "*",)):
            entry = found.setdefault(owner, Entry(owner))
            entry.bytes, entry.used = int(nbytes or 0), float(used or 0.0)
    return sorted(found.values(), key=lambda e: (e.used, e.owner))


def remove(disk: DiskStore, owner: str, forget: Callable[[str], None] | None = None) -> int:
    """Drop one conversation: block rows and recall index (committed), then chunks; bytes
    freed. `forget` drops the recall index instead (the server's, which also caches it)."""
    if forget is not None:
        forget(owner)
    with disk.transaction() as conn:
        catalog.forget(conn, owner)
        if forget is None:
            recall_index.forget(conn, owner)
    return disk.delete_owner(owner)


def trim(
    disk: DiskStore,
    budget: int,
    keep: set[str],
    forget: Callable[[str], None] | None = None,
) -> tuple[int, int]:
    """Remove least recently used conversations (never those in `keep`) until the ``api:``
    chunks take at most `budget` bytes; (conversations removed, bytes freed)."""
    found = entries(disk)
    total = sum(e.bytes for e in found)
    removed = freed = 0
    for entry in found:
        if total <= budget:
            break
        if entry.owner in keep:
            continue
        got = remove(disk, entry.owner, forget)
        total -= entry.bytes
        removed += 1
        freed += got
    return removed, freed


def orphans(disk: DiskStore) -> dict[str, int]:
    """``api:`` owners with chunks that no block row names (a removal cut short), and how
    many (`cascade verify`)."""
    pattern = catalog.PREFIX + "*"
    with disk.lock:
        conn = disk.conn
        if not catalog.has_table(conn):
            query = "SELECT owner, COUNT(*) FROM chunks WHERE owner GLOB ? GROUP BY owner"
        else:
            query = (
                "SELECT c.owner, COUNT(*) FROM chunks c WHERE c.owner GLOB ? AND NOT EXISTS "
                "(SELECT 1 FROM api_blocks b WHERE b.owner = c.owner "
                "AND c.key = b.owner || ':' || b.idx) GROUP BY c.owner"
            )
        return {owner: int(n) for owner, n in conn.execute(query, (pattern,))}


def clear(disk: DiskStore) -> tuple[int, int]:
    """Remove every conversation the server stored (`cascade rm --api`)."""
    owners = {e.owner for e in entries(disk)} | {
        o for o in disk.owners() if o.startswith(catalog.PREFIX)
    }
    freed = sum(remove(disk, o) for o in sorted(owners))
    return len(owners), freed
