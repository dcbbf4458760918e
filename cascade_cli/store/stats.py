"""Per-tier counters and latency histograms, accumulated in memory and merged into the index DB.

Deltas are added to the persisted totals with ``value = value + excluded.value`` on flush/close,
so figures stay true when several processes use the same store one after another (or a
read-only ``stats`` reader runs beside a writer).
"""

from __future__ import annotations

import bisect
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

TIERS = ("window", "ram", "disk", "remote")
#: Counters of the remote tier besides COUNTERS (store/remote.py).
REMOTE_COUNTERS = ("errors", "corrupt", "published")
COUNTERS = ("hits", "misses", "bytes_read", "bytes_written", "evictions")
#: Upper bounds (seconds) of the latency buckets: 10 µs · 2^i, i = 0..20 (10 µs … ~10.5 s).
#: A final overflow bucket counts everything slower.
BUCKETS: tuple[float, ...] = tuple(1e-5 * 2**i for i in range(21))
#: Histograms always present in a snapshot (others appear once observed).
LATENCY_OPS = ("read", "write")


def bucket_of(seconds: float) -> int:
    """Index of the bucket that counts ``seconds`` (len(BUCKETS) = overflow)."""
    return bisect.bisect_left(BUCKETS, seconds)


class Stats:
    """Thread-safe in-memory deltas not yet merged into the DB."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, str], int] = {}
        self._hist: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}

    def add(self, tier: str, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``tier.name``."""
        if not n:
            return
        with self._lock:
            key = (tier, name)
            self._counters[key] = self._counters.get(key, 0) + n

    def observe(self, op: str, seconds: float) -> None:
        """Count one ``op`` that took ``seconds``."""
        with self._lock:
            hist = self._hist.setdefault(op, [0] * (len(BUCKETS) + 1))
            hist[bucket_of(seconds)] += 1
            self._sums[op] = self._sums.get(op, 0.0) + seconds

    @contextmanager
    def timer(self, op: str) -> Iterator[None]:
        """Observe the duration of the ``with`` block (also when it raises)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.observe(op, time.perf_counter() - start)

    def pending(self) -> tuple[dict[tuple[str, str], int], dict[str, list[int]], dict[str, float]]:
        """Copies of the unmerged counters, histograms and latency sums."""
        with self._lock:
            return (
                dict(self._counters),
                {k: list(v) for k, v in self._hist.items()},
                dict(self._sums),
            )

    def merge_into(self, conn: sqlite3.Connection) -> None:
        """Add the deltas to the DB totals in one transaction, then forget them.

        ``conn`` must be in autocommit mode; the caller serialises use of the connection.
        """
        counters, hist, sums = self.pending()
        if not counters and not hist:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                "INSERT INTO stats_counters (tier, name, value) VALUES (?, ?, ?) "
                "ON CONFLICT (tier, name) DO UPDATE SET value = value + excluded.value",
                [(t, n, v) for (t, n), v in counters.items()],
            )
            conn.executemany(
                "INSERT INTO stats_latency (op, bucket, count) VALUES (?, ?, ?) "
                "ON CONFLICT (op, bucket) DO UPDATE SET count = count + excluded.count",
                [(op, i, c) for op, counts in hist.items() for i, c in enumerate(counts) if c],
            )
            conn.executemany(
                "INSERT INTO stats_latency_sum (op, seconds) VALUES (?, ?) "
                "ON CONFLICT (op) DO UPDATE SET seconds = seconds + excluded.seconds",
                list(sums.items()),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        with self._lock:  # subtract what was merged; keep anything added meanwhile
            for key, v in counters.items():
                self._counters[key] -= v
                if not self._counters[key]:
                    del self._counters[key]
            for op, counts in hist.items():
                live = self._hist[op]
                for i, c in enumerate(counts):
                    live[i] -= c
                if not any(live):
                    del self._hist[op]
            for op, s in sums.items():
                self._sums[op] -= s
                if op not in self._hist:
                    del self._sums[op]


class StatsSource(Protocol):
    """What snapshot() needs from a store (DiskStore satisfies it)."""

    @property
    def conn(self) -> sqlite3.Connection: ...

    @property
    def stats(self) -> Stats: ...

    @property
    def lock(self) -> threading.RLock: ...


def owners(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Per-owner aggregation from the chunk index: chunks, tokens, bytes, scheme(s), pinned."""
    rows = conn.execute(
        "SELECT owner, COUNT(*), COALESCE(SUM(tok_end - tok_start), 0), COALESCE(SUM(nbytes), 0),"
        " GROUP_CONCAT(DISTINCT scheme), MAX(pinned) FROM chunks GROUP BY owner ORDER BY owner"
    ).fetchall()
    return [
        {
            "owner": owner,
            "chunks": n,
            "tokens": tokens,
            "bytes": nbytes,
            "scheme": ",".join(sorted(str(schemes or "").split(","))),
            "pinned": bool(pinned),
        }
        for owner, n, tokens, nbytes, schemes, pinned in rows
    ]


def _persisted(conn: sqlite3.Connection) -> dict[str, Any]:
    tiers = {t: dict.fromkeys(COUNTERS, 0) for t in TIERS}
    for tier, name, value in conn.execute("SELECT tier, name, value FROM stats_counters"):
        tiers.setdefault(tier, dict.fromkeys(COUNTERS, 0))[name] = value
    latency: dict[str, Any] = {op: empty_histogram() for op in LATENCY_OPS}
    for op, bucket, count in conn.execute("SELECT op, bucket, count FROM stats_latency"):
        latency.setdefault(op, empty_histogram())["counts"][bucket] += count
    for op, seconds in conn.execute("SELECT op, seconds FROM stats_latency_sum"):
        latency.setdefault(op, empty_histogram())["seconds"] += seconds
    chunks, nbytes, pinned = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(nbytes), 0), COALESCE(SUM(nbytes * pinned), 0) FROM chunks"
    ).fetchone()
    return {
        "tiers": tiers,
        "latency": latency,
        "disk": {"chunks": chunks, "bytes": nbytes, "pinned_bytes": pinned},
        "owners": owners(conn),
    }


def empty_histogram() -> dict[str, Any]:
    return {"bounds": list(BUCKETS), "counts": [0] * (len(BUCKETS) + 1), "count": 0, "seconds": 0.0}


def snapshot(source: sqlite3.Connection | StatsSource) -> dict[str, Any]:
    """Totals: ``tiers.{window,ram,disk}.{hits,misses,bytes_read,bytes_written,evictions}``,
    ``latency.{read,write,...}.{bounds,counts,count,seconds}``, ``disk.{chunks,bytes,pinned_bytes}``
    and ``owners[]``. Given a store, its unmerged in-memory deltas are included.
    """
    if isinstance(source, sqlite3.Connection):
        snap = _persisted(source)
    else:
        with source.lock:
            snap = _persisted(source.conn)
        counters, hist, sums = source.stats.pending()
        for (tier, name), v in counters.items():
            row = snap["tiers"].setdefault(tier, dict.fromkeys(COUNTERS, 0))
            row[name] = row.get(name, 0) + v  # a tier's own counters (remote: published, …)
        for op, counts in hist.items():
            h = snap["latency"].setdefault(op, empty_histogram())
            h["counts"] = [a + b for a, b in zip(h["counts"], counts, strict=True)]
        for op, s in sums.items():
            snap["latency"][op]["seconds"] += s
    for h in snap["latency"].values():
        h["count"] = sum(h["counts"])
    return snap
