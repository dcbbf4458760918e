"""The disk tier: a SQLite index (WAL) plus one data file per chunk.

Layout under the store directory::

    index.sqlite (+ -wal, -shm)   chunk index, store identity, stats, later namespaces' tables
    lock                          flock'd by the writing process; holds its PID
    data/<aa>/<h16>-<r8>.kv       one chunk payload, exactly ``nbytes`` long, never rewritten

Why one file per chunk rather than append-only segments: chunks are large (~1–7 MB), so the
per-file overhead (an inode, a directory entry, a few KB of slack) is well under 1 %, and
deleting a document must give its space back. With a file per chunk, delete is ``unlink`` and the
space is free at once; with segments it needs a compaction pass that copies the survivors and
has its own crash windows. Files are also never modified in place, so a torn write can only ever
be an unrenamed ``.tmp`` file, and concurrent writers never contend on a shared segment tail.

Write order (as python-diskcache): payload written to ``*.tmp``, fsynced, renamed to a fresh
name, directory fsynced, and only then the index row committed (synchronous=FULL); a replaced
file is unlinked after the commit. Deletes commit the row removal first, then unlink the bytes.
A crash at any point therefore leaves the old or the new state; leftovers are only unreferenced
files, which ``open`` removes (see :class:`RepairReport`).
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from cascade_cli.errors import StoreError, StoreLockedError
from cascade_cli.store import repair as _repair
from cascade_cli.store.budget import Usage, lru_victims
from cascade_cli.store.files import (
    crash_point,
    fsync_dir,
    make_dir,
    write_durable,
)
from cascade_cli.store.index import COLUMNS, LOCK, Layout, open_index, row_values, writable
from cascade_cli.store.lock import StoreLock
from cascade_cli.store.reads import ChunkReader, checksum
from cascade_cli.store.records import ChunkMeta, RepairReport
from cascade_cli.store.schema import FORMAT_VERSION
from cascade_cli.store.stats import Stats

DATA = "data"
#: Seconds between merges of this process's counters into the index (also on close), so
#: `cascade stats` sees a running process and loses at most this much of a killed one.
FLUSH_EVERY = 2.0
Mode = Literal["write", "shared", "readonly"]


class DiskStore(ChunkReader):
    """The on-disk chunk tier. Thread-safe; one writing process at a time (see :class:`StoreLock`),
    any number of ``shared`` readers beside it."""

    def __init__(
        self,
        root: Path,
        conn: sqlite3.Connection,
        lock: StoreLock | None,
        fingerprint: str | None,
        budget: int,
        mode: Mode = "write",
    ) -> None:
        self.path = root
        self._conn = conn
        self._flock = lock
        guard = getattr(conn, "guard", None)  # a LockedConnection's own lock
        self._lock: threading.RLock = guard if guard is not None else threading.RLock()
        self.fingerprint = fingerprint
        self.budget = budget
        self.mode = mode
        self.readonly = mode == "readonly"
        self._stats = Stats()
        self._touched: dict[str, float] = {}
        self._usage: Usage | None = None  # payload bytes (all, evictable), kept by the writer
        self._flushed = time.monotonic()
        self.repair_report = RepairReport()
        self._closed = False

    # ---- opening -------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | Path,
        fingerprint: str | None,
        budget: int = 0,
        timeout: float = 5.0,
        *,
        readonly: bool = False,
        mode: Mode | None = None,
        layout: Layout | None = None,
        verify: Literal["size", "full"] = "size",
        repair: bool = True,
    ) -> DiskStore:
        """Open (creating if needed) the store at ``path`` and repair it.

        ``fingerprint`` identifies the model whose KV states the store holds; a store made with
        another raises FingerprintMismatchError (None skips the check, e.g. for ``stats``/``rm``).
        ``layout`` adds further requirements (see index.check_identity).
        ``budget`` > 0 caps total payload bytes by evicting least-recently-used unpinned chunks.
        ``mode``: ``write`` (the default) takes the exclusive lock and repairs; ``shared`` takes
        no lock and never repairs, and saves a chunk only if it can take the lock at once;
        ``readonly`` (or ``readonly=True``) never writes (but upgrades the schema of a store an
        older release wrote, once). Both work beside a running writer.
        ``verify="full"`` also checksums every payload on open (slow on big stores).
        ``repair=False`` (for `cascade verify --repair`, which recomputes damaged chunks from their
        rows' token ids) leaves rows with missing or short files in place.
        """
        root = Path(path).expanduser()
        mode = mode or ("readonly" if readonly else "write")
        if mode == "shared" and root.is_dir() and not writable(root):
            mode = "readonly"  # read-only media: a reader still reads, and writes nothing
        conn, lock, fingerprint = open_index(
            root, fingerprint, mode=mode, timeout=timeout, layout=layout
        )
        if mode != "write":
            return cls(root, conn, None, fingerprint, 0, mode)
        assert lock is not None
        try:
            store = cls(root, conn, lock, fingerprint, budget, mode)
            make_dir(root / DATA)
            if repair:
                store.repair_report = _repair.repair(conn, root / DATA, full=verify == "full")
            if budget:
                store._evict(keep="")
        except BaseException:
            conn.close()
            lock.release()
            raise
        return store

    # ---- plumbing for other modules --------------------------------------------------------

    @property
    def conn(self) -> sqlite3.Connection:
        """The index connection (autocommit). Hold :attr:`lock` while using it."""
        return self._conn

    @property
    def lock(self) -> threading.RLock:
        """Serialises use of :attr:`conn` across threads."""
        return self._lock

    @property
    def stats(self) -> Stats:
        """This process's unmerged counters (disk tier filled here; RAM/window by callers)."""
        return self._stats

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``with store.transaction() as conn:`` — one BEGIN IMMEDIATE … COMMIT, under the lock."""
        self._writable()
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def _writable(self) -> None:
        if self._closed:
            raise StoreError(f"store {self.path} is closed")
        if self.readonly:
            raise StoreError(f"store {self.path} is open read-only")

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the store's writer lock for a change to chunk files: the writer already holds
        it; a ``shared`` reader takes it only if free at once (else StoreLockedError), so no
        repair can mistake its half-saved file for garbage."""
        self._writable()
        if self._flock is not None:
            yield
            return
        lock = StoreLock.acquire(self.path / LOCK, timeout=0)
        try:
            yield
        finally:
            lock.release()

    def _file(self, name: str) -> Path:
        return self.path / DATA / name

    # ---- writing -----------------------------------------------------------------------------

    def put(self, meta: ChunkMeta, payload: bytes | bytearray | memoryview) -> ChunkMeta:
        """Durably save ``payload`` under ``meta.key`` (replacing any previous one)."""
        self._writable()
        if not self.fingerprint:
            raise StoreError(f"store {self.path} has no model fingerprint; open it with one")
        view = memoryview(payload).cast("B")
        h = hashlib.blake2b(meta.key.encode(), digest_size=8).hexdigest()
        name = f"{h[:2]}/{h}-{secrets.token_hex(4)}.kv"
        while self._file(name).exists():  # never overwrite a file a row may point at
            name = f"{h[:2]}/{h}-{secrets.token_hex(4)}.kv"
        now = time.time()
        rec = meta.replace(
            nbytes=len(view), checksum=checksum(view), version=FORMAT_VERSION,
            created=now, accessed=now, fingerprint=self.fingerprint,
        )  # fmt: skip
        path = self._file(name)
        with self.exclusive(), self._stats.timer("write"):
            make_dir(path.parent)
            write_durable(path, view)
            crash_point("after_data_fsync")
            try:
                with self.transaction() as conn:
                    old = conn.execute(
                        "SELECT file, nbytes, pinned FROM chunks WHERE key = ?", (rec.key,)
                    ).fetchone()
                    crash_point("inside_commit")
                    conn.execute("DELETE FROM evicted WHERE key = ?", (rec.key,))
                    conn.execute(
                        f"INSERT OR REPLACE INTO chunks ({COLUMNS}, file) VALUES "
                        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (*row_values(rec), name),
                    )
                    self._touched.pop(rec.key, None)
            except BaseException:
                path.unlink(missing_ok=True)
                raise
            crash_point("after_commit")
            if old:
                self._unlink([old[0]])
        with self._lock:
            if self._usage is not None:
                self._usage.add(rec.nbytes, rec.pinned)
                if old:
                    self._usage.add(-old[1], bool(old[2]))
        self._stats.add("disk", "bytes_written", rec.nbytes)
        if self.budget:
            self._evict(keep=rec.key)
        self._tick()
        return rec

    def set_pinned(self, owner: str, pinned: bool = True) -> int:
        """Pin (or unpin) every chunk of ``owner``; pinned chunks are never evicted."""
        with self.transaction() as conn:
            cur = conn.execute("UPDATE chunks SET pinned = ? WHERE owner = ?", (int(pinned), owner))
            self._usage = None  # recounted on the next eviction check
            return cur.rowcount

    def delete(self, key: str) -> int:
        """Remove one chunk; returns bytes freed (0 if absent)."""
        return self._delete("key = ?", (key,))

    def delete_owner(self, owner: str) -> int:
        """Remove every chunk of ``owner``; returns bytes freed."""
        return self._delete("owner = ?", (owner,))

    def _delete(self, where: str, args: tuple[str, ...], evicting: bool = False) -> int:
        with self.exclusive():
            with self.transaction() as conn:
                rows = conn.execute(
                    f"SELECT key, file, nbytes, pinned, owner FROM chunks WHERE {where}", args
                ).fetchall()
                conn.execute(f"DELETE FROM chunks WHERE {where}", args)
                conn.execute(f"DELETE FROM evicted WHERE {where}", args)
                if evicting:
                    conn.executemany(
                        "INSERT OR REPLACE INTO evicted (key, owner, at) VALUES (?, ?, ?)",
                        [(r[0], r[4], time.time()) for r in rows],
                    )
                for key, _, n, pinned, _ in rows:
                    self._touched.pop(key, None)
                    if self._usage is not None:
                        self._usage.add(-n, bool(pinned))
            crash_point("delete_after_commit")
            self._unlink([r[1] for r in rows])
        return sum(r[2] for r in rows)

    def _unlink(self, names: list[str]) -> None:
        dirs: set[Path] = set()
        for name in names:
            path = self._file(name)
            path.unlink(missing_ok=True)
            dirs.add(path.parent)
        for d in dirs:
            with contextlib.suppress(FileNotFoundError):
                fsync_dir(d)

    def _evict(self, keep: str) -> None:
        """Drop least-recently-used unpinned chunks (never ``keep``) until within budget.

        The writer keeps running totals (:class:`Usage`), so a put that cannot evict anything —
        within budget, or every chunk pinned — costs no query at all."""
        if self.mode != "write":
            return
        with self._lock:
            if self._usage is None:
                self._usage = Usage.of(self._conn)
            if not self._usage.over(self.budget):
                return
            self._flush_touches()
            self._usage = Usage.of(self._conn)  # exact: readers may have saved chunks meanwhile
            if not self._usage.over(self.budget):
                return
            victims = lru_victims(self._conn, self._usage.total - self.budget, keep)
            for i in range(0, len(victims), 500):
                batch = victims[i : i + 500]
                crash_point("mid_eviction")
                self._delete(f"key IN ({','.join('?' * len(batch))})", tuple(batch), True)
        self._stats.add("disk", "evictions", len(victims))

    # ---- handing the writer lock over (a long-running server between requests) -------------

    def yield_lock(self) -> None:
        """Let other processes write: release the writer lock and read as a ``shared`` opener
        until :meth:`take_lock`. Callers finish their queued saves first."""
        with self._lock:
            if self._flock is None or self.mode != "write":
                return
            self.flush()
            lock, self._flock = self._flock, None
            self.mode = "shared"
            lock.release()

    def take_lock(self, timeout: float = 0.0) -> bool:
        """Become the writer again unless another process writes (then stay ``shared``: saves
        are skipped); returns whether this process is the writer now."""
        with self._lock:
            if self.mode == "write":
                return True
            if self.readonly or self._closed:
                return False
            try:
                self._flock = StoreLock.acquire(self.path / LOCK, timeout=timeout)
            except StoreLockedError:
                return False
            self.mode = "write"
            self._usage = None  # another writer may have changed the store: recount
            return True

    # ---- lifecycle ---------------------------------------------------------------------------

    def _flush_touches(self) -> None:
        with self._lock:
            if not self._touched or self.readonly:
                return
            touched, self._touched = self._touched, {}
            with self.transaction() as conn:
                conn.executemany(
                    "UPDATE chunks SET accessed = ? WHERE key = ?",
                    [(t, k) for k, t in touched.items()],
                )

    def flush(self) -> None:
        """Persist access times and merge this process's stats into the index."""
        if self._closed or self.readonly:
            return
        with self._lock:
            self._flushed = time.monotonic()
            self._flush_touches()
            self._stats.merge_into(self._conn)

    def _tick(self) -> None:
        """Flush when the last flush is FLUSH_EVERY seconds old."""
        if time.monotonic() - self._flushed >= FLUSH_EVERY:
            self.flush()

    def close(self) -> None:
        """Flush, close the index and release the lock (idempotent)."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            with self._lock:
                self._conn.close()
            if self._flock is not None:
                self._flock.release()

    def __enter__(self) -> DiskStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
