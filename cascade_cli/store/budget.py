"""The disk budget's eviction policy: least recently used unpinned chunks first."""

from __future__ import annotations

import sqlite3


def lru_victims(conn: sqlite3.Connection, excess: int, keep: str) -> list[str]:
    """Keys of unpinned chunks (never ``keep``), least recently used first, whose payloads add up
    to at least ``excess`` bytes (fewer if the unpinned ones do not)."""
    victims: list[str] = []
    for key, n in conn.execute(
        "SELECT key, nbytes FROM chunks WHERE pinned = 0 AND key != ? ORDER BY accessed, created",
        (keep,),
    ):
        if excess <= 0:
            break
        victims.append(key)
        excess -= n
    return victims
