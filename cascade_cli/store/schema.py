"""Index schema as an ordered list of numbered migrations (in the style of simonw/llm).

Each migration is a function ``mNNN_name(conn)``; it runs once, inside a transaction together
with the row in ``_migrations`` that records it, so a crash never half-applies one. Code outside
``store/`` adds its own tables by registering a further list under its own namespace::

    from cascade_cli.store.schema import register_migrations

    def m001_documents(conn): conn.execute("CREATE TABLE documents (...)")

    register_migrations("docs", [m001_documents])

Registered namespaces are applied, in registration order, every time a store opens read-write.
Never edit or reorder a released migration; append a new one.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence

Migration = Callable[[sqlite3.Connection], None]

#: Bumped when the payload-file or record layout changes in a way old readers cannot handle.
FORMAT_VERSION = 1


def m001_initial(conn: sqlite3.Connection) -> None:
    """Store identity and the chunk index."""
    conn.execute("CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute(
        """CREATE TABLE chunks (
            key TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            idx INTEGER NOT NULL,
            tok_start INTEGER NOT NULL,
            tok_end INTEGER NOT NULL,
            tokens BLOB NOT NULL,
            pos INTEGER NOT NULL,
            scheme TEXT NOT NULL,
            nbytes INTEGER NOT NULL,
            checksum INTEGER NOT NULL,
            version INTEGER NOT NULL,
            created REAL NOT NULL,
            accessed REAL NOT NULL,
            pinned INTEGER NOT NULL DEFAULT 0,
            fingerprint TEXT NOT NULL,
            file TEXT NOT NULL UNIQUE
        )"""
    )
    conn.execute("CREATE INDEX chunks_owner ON chunks (owner, idx)")
    conn.execute("CREATE INDEX chunks_lru ON chunks (pinned, accessed)")


def m002_stats(conn: sqlite3.Connection) -> None:
    """Cross-process counters and latency histograms (see stats.py)."""
    conn.execute(
        """CREATE TABLE stats_counters (
            tier TEXT NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (tier, name)
        )"""
    )
    conn.execute(
        """CREATE TABLE stats_latency (
            op TEXT NOT NULL, bucket INTEGER NOT NULL, count INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (op, bucket)
        )"""
    )
    conn.execute(
        """CREATE TABLE stats_latency_sum (
            op TEXT PRIMARY KEY, seconds REAL NOT NULL DEFAULT 0
        )"""
    )


def m003_evicted(conn: sqlite3.Connection) -> None:
    """Keys the disk budget evicted (until saved again), so a missing chunk can be told from
    a lost one."""
    conn.execute(
        "CREATE TABLE evicted (key TEXT PRIMARY KEY, owner TEXT NOT NULL, at REAL NOT NULL)"
    )
    conn.execute("CREATE INDEX evicted_owner ON evicted (owner)")


#: The store's own migrations. Append only.
STORE_MIGRATIONS: list[Migration] = [m001_initial, m002_stats, m003_evicted]

_REGISTRY: dict[str, list[Migration]] = {"store": STORE_MIGRATIONS}


def register_migrations(namespace: str, migrations: Sequence[Migration]) -> None:
    """Add (or extend) a namespace's ordered migrations; applied on the next read-write open."""
    if namespace == "store":
        raise ValueError("the 'store' namespace is reserved")
    current = _REGISTRY.setdefault(namespace, [])
    names = {fn.__name__ for fn in current}
    current.extend(fn for fn in migrations if fn.__name__ not in names)


def registered() -> dict[str, list[Migration]]:
    """Every namespace's migrations, in application order."""
    return {name: list(fns) for name, fns in _REGISTRY.items()}


def _ensure_table(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE IF NOT EXISTS _migrations (
            namespace TEXT NOT NULL, name TEXT NOT NULL, applied REAL NOT NULL,
            PRIMARY KEY (namespace, name)
        )"""
    )


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    """Whether the index has table `name` (a layer's migrations may not have run yet)."""
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return found is not None


def applied(conn: sqlite3.Connection) -> set[tuple[str, str]]:
    """(namespace, name) of every migration already applied."""
    if not has_table(conn, "_migrations"):
        return set()
    return {(ns, name) for ns, name in conn.execute("SELECT namespace, name FROM _migrations")}


def pending(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(namespace, name) of registered migrations not yet applied."""
    done = applied(conn)
    return [
        (ns, fn.__name__)
        for ns, fns in _REGISTRY.items()
        for fn in fns
        if (ns, fn.__name__) not in done
    ]


def migrate(conn: sqlite3.Connection) -> list[str]:
    """Apply every pending migration, each in its own transaction; return 'ns.name' applied.

    ``conn`` must be in autocommit mode (``isolation_level=None``).
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        _ensure_table(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    done: list[str] = []
    for ns, fns in registered().items():
        for fn in fns:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(
                    "SELECT 1 FROM _migrations WHERE namespace = ? AND name = ?",
                    (ns, fn.__name__),
                ).fetchone()
                if row is None:
                    fn(conn)
                    conn.execute(
                        "INSERT INTO _migrations (namespace, name, applied) VALUES (?, ?, ?)",
                        (ns, fn.__name__, time.time()),
                    )
                    done.append(f"{ns}.{fn.__name__}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
    return done
