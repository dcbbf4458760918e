"""The disk budget's eviction policy: least recently used unpinned chunks first — chunks of
cache owners (the server's stored prompts, which clients resend whole) before any document's
or session's, so that server traffic never evicts ingested content while it has its own."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

#: Owners whose chunks are a cache of data their clients resend (GLOB pattern): evicted first.
CACHE_OWNERS = "api:*"


@dataclass
class Usage:
    """Payload bytes in the store: all of them, and those of unpinned (evictable) chunks."""

    total: int = 0
    evictable: int = 0

    @classmethod
    def of(cls, conn: sqlite3.Connection) -> Usage:
        """Counted from the index (one scan)."""
        total, evictable = conn.execute(
            "SELECT COALESCE(SUM(nbytes), 0), COALESCE(SUM(nbytes * (1 - pinned)), 0) FROM chunks"
        ).fetchone()
        return cls(int(total), int(evictable))

    def add(self, nbytes: int, pinned: bool) -> None:
        """Count a saved (``nbytes`` > 0) or removed (< 0) chunk."""
        self.total += nbytes
        if not pinned:
            self.evictable += nbytes

    def over(self, budget: int) -> bool:
        """Whether eviction can do anything: above ``budget`` with something evictable."""
        return self.total > budget and self.evictable > 0


def lru_victims(conn: sqlite3.Connection, excess: int, keep: str) -> list[str]:
    """Keys of unpinned chunks (never ``keep``), cache owners' first, then least recently used
    first, whose payloads add up to at least ``excess`` bytes (fewer if the unpinned ones do
    not)."""
    victims: list[str] = []
    for key, n in conn.execute(
        "SELECT key, nbytes FROM chunks WHERE pinned = 0 AND key != ? "
        "ORDER BY owner GLOB ? DESC, accessed, created",
        (keep, CACHE_OWNERS),
    ):
        if excess <= 0:
            break
        victims.append(key)
        excess -= n
    return victims
