"""Listing and removing sessions without loading a model (`cascade sessions`, `rm --session`)."""

from __future__ import annotations

from typing import Any

from cascade_cli.recall import tables as recall_index
from cascade_cli.session import transcripts
from cascade_cli.session.transcripts import Session
from cascade_cli.store import SNAP, DiskStore, owners


def remove(disk: DiskStore, s: Session) -> int:
    """Delete a session: its rows and recall index first (committed), then its chunks; returns
    bytes freed. A crash in between leaves chunks without a row, which `sweep` deletes."""
    with disk.transaction() as conn:
        recall_index.forget(conn, s.owner)
        transcripts.delete(conn, s)
    return disk.delete_owner(s.owner) + disk.delete_owner(SNAP + s.owner)


def sweep(disk: DiskStore) -> int:
    """Delete the chunks of sessions whose rows are gone; returns bytes freed."""
    with disk.lock:
        if not transcripts.has_tables(disk.conn):
            return 0
        stale = transcripts.orphan_owners(disk.conn, disk.owners())
    return sum(disk.delete_owner(o) for o in stale)


def rows(disk: DiskStore) -> list[dict[str, Any]]:
    """What `cascade sessions --json` and `cascade stats --json` print per session."""
    with disk.lock:
        sizes = {o["owner"]: o for o in owners(disk.conn)}
        found = transcripts.sessions(disk.conn)
    result = []
    for s in found:
        agg = sizes.get(s.owner, {})
        result.append(
            {
                "name": s.name,
                "turns": s.turns,
                "tokens": s.tokens,
                "chunks": int(agg.get("chunks", 0)),
                "bytes": int(agg.get("bytes", 0)),
                "compression": s.scheme,
                "model": s.model,
                "last_used": s.updated,
            }
        )
    return result
