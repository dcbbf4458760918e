"""Read-ahead and write-back between the disk tier and the RAM tier, on small thread pools.

The codec stays outside ``store/``: pass ``encode(blob, scheme) -> bytes`` (the codec's own
``encode``) and ``decode(payload[, at]) -> state`` (e.g. ``codec.decode`` with the model's RoPE;
``at`` asks for the state moved so that its chunk starts at that position).

A ``remote`` source (documents.remote_source) adds the tier below disk: a chunk the disk lacks (or holds
damaged) is fetched from it on the reader threads, decoded, and saved to disk on the write-back
threads; a chunk saved to disk is published to it from the write-back thread, after its commit.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import partial
from types import TracebackType
from typing import Any, Protocol

from cascade_cli.errors import CodecError, CorruptChunkError, NotFoundError, StoreLockedError
from cascade_cli.store.disk import DiskStore
from cascade_cli.store.lru import RamCache
from cascade_cli.store.records import ChunkMeta

Encode = Callable[[Any, str], bytes]
#: decode(payload) -> state, or decode(payload, at) -> the state moved to start at position `at`;
#: decode(payload, at=at, slim=True) -> without the sections a far-from-the-end chunk does not
#: need (a sliding-window model's SWA cache; see kv.payload.decode)
Decode = Callable[..., Any]


class RemoteSource(Protocol):
    """The tier below disk, as the pager sees it: fetch by store key, publish after a commit,
    reject a fetched value that does not decode. None raises: an unavailable remote is a miss,
    a failed publish is counted."""

    def fetch(self, key: str) -> tuple[ChunkMeta, bytes] | None: ...

    def publish(self, meta: ChunkMeta, payload: bytes) -> None: ...

    def reject(self, key: str) -> None: ...


def lower_priority(increment: int) -> None:
    """Lower this thread's scheduling priority (Linux threads have their own nice value), so
    write-back uses CPU the model's threads leave idle."""
    if increment <= 0:
        return
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), increment)


class Pager:
    """Prefetch (read + verify + decode ahead of need) and write-back (encode + fsync off-thread).

    ``get`` serves a prefetched state, else one from RAM, else loads synchronously. Prefetched
    states are held by the pager until taken (at most ``max_prefetch``), not only by the RAM
    tier, so read-ahead larger than the RAM tier does not evict itself.
    ``save`` returns at once; at most ``max_pending`` saves are queued or running (further calls
    block), a failed save is re-raised by the next ``save`` or by ``flush``. On a ``shared``
    store a save that finds the writer lock taken is skipped (the chunk is recomputed again
    next time) rather than failing a reader.
    """

    def __init__(
        self,
        disk: DiskStore,
        ram: RamCache,
        encode: Encode,
        decode: Decode,
        *,
        readers: int = 2,
        writers: int = 2,
        max_pending: int = 4,
        max_prefetch: int = 16,
        writer_nice: int = 0,
        remote: RemoteSource | None = None,
    ) -> None:
        self.disk = disk
        self.remote = remote
        self.ram = ram
        self._encode = encode
        self._decode = decode
        self.max_prefetch = max_prefetch
        self._readers = ThreadPoolExecutor(readers, thread_name_prefix="cascade-read")
        self._writers = ThreadPoolExecutor(
            writers,
            thread_name_prefix="cascade-write",
            initializer=lower_priority,
            initargs=(writer_nice,),
        )
        self._slots = threading.BoundedSemaphore(max_pending)
        self._lock = threading.RLock()  # a done future runs its callback in add_done_callback
        self._reading: dict[str, Future[tuple[Any, bool]]] = {}
        self._saving: dict[str, Future[ChunkMeta]] = {}
        self._errors: list[BaseException] = []
        self._backlog: list[tuple[str, int | None]] = []
        self._slim: set[str] = set()  # keys the last prefetch wants decoded slim
        self._gen: dict[str, int] = {}  # bumped by save(): loads begun earlier are stale
        self._origin: dict[str, str] = {}  # keys whose last load came from the remote tier

    # ---- reads -------------------------------------------------------------------------------

    def prefetch(
        self,
        keys: Iterable[str],
        at: Mapping[str, int] | None = None,
        slim: Iterable[str] = (),
    ) -> int:
        """Start loading the chunks ``keys`` will need next (in that order); returns how many
        loads were started now. Keys already in RAM or in flight are skipped; finished loads of
        keys no longer wanted are dropped. At most ``max_prefetch`` states are in flight or loaded
        and not yet taken; the rest wait in a backlog that refills as ``get`` takes states
        (replaced by the next call).
        ``at`` maps keys to the position their chunk should start at once decoded; keys in
        ``slim`` are decoded slim (never cached in RAM: the RAM tier holds whole states).
        """
        wanted = list(dict.fromkeys(keys))
        targets = dict(at or {})
        with self._lock:
            self._slim = set(slim)
            keep = set(wanted)
            for key in [k for k in self._reading if k not in keep]:
                self._reading.pop(key).cancel()  # a running load finishes and fills RAM
            self._backlog = [(k, targets.get(k)) for k in wanted]
            fresh = self._refill()
        if len(fresh) > 1:
            # all reads in flight at once: readers decode while the kernel fetches the rest
            self.disk.advise(fresh[1:])
        return len(fresh)

    def _refill(self) -> list[str]:
        """Start backlog loads while fewer than ``max_prefetch`` are in flight or loaded and not
        yet taken (caller holds the lock), so read-ahead never outruns the consumer."""
        started: list[str] = []
        while self._backlog and len(self._reading) < self.max_prefetch:
            key, at = self._backlog.pop(0)
            if key in self._reading or key in self.ram:
                continue
            self._reading[key] = self._readers.submit(self._load, key, at, key in self._slim)
            started.append(key)
        return started

    def get(self, key: str, at: int | None = None, slim: bool = False) -> Any:
        """The ready state of ``key``; raises NotFoundError / CorruptChunkError from the disk.

        A state loaded here (not prefetched, not in RAM) is decoded at ``at`` when given; states
        from RAM or a prefetch are as they were decoded — callers read positions from them."""
        with self._lock:
            fut = self._reading.pop(key, None)
            self._backlog = [(k, a) for k, a in self._backlog if k != key]
            started = self._refill()
        if started:
            self.disk.advise(started)
        if fut is not None:
            return fut.result()[0]
        state = self.ram.get(key)
        if state is not None:
            with self._lock:
                self._origin.pop(key, None)
            return state
        return self._load(key, at, slim)[0]

    def get_remote(self, key: str, at: int | None = None) -> Any:
        """The state of ``key`` from the remote tier only (the disk's copy, if any, is not the
        one wanted): a read-ahead that fetched it from there, else a fetch now; NotFoundError
        when there is none (or no remote tier)."""
        with self._lock:
            fut = self._reading.pop(key, None)
        if fut is not None:
            try:
                state = fut.result()[0]
            except Exception:  # (a miss: fetched again below, where it can say so)
                state = None
            with self._lock:
                fetched = self._origin.get(key) == "remote"
            if state is not None and fetched:
                return state
        return self._load(key, at, local=False)[0]

    def origin(self, key: str) -> str | None:
        """``remote`` if the state last handed out for ``key`` came from the remote tier (asked
        once per load: the answer is forgotten)."""
        with self._lock:
            return self._origin.pop(key, None)

    def tier(self, key: str, warm: bool) -> str:
        """The tier the state last handed out for ``key`` came from: ``remote``, else ``ram``
        when it was in RAM before the layout began (``warm``), else ``disk``."""
        return self.origin(key) or ("ram" if warm else "disk")

    def _load(
        self, key: str, at: int | None = None, slim: bool = False, local: bool = True
    ) -> tuple[Any, bool]:
        with self._lock:
            pending = self._saving.get(key)
            gen = self._gen.get(key, 0)
            self._origin.pop(key, None)  # set again below if this load is the remote tier's
        if pending is not None:
            wait([pending])
        got: tuple[ChunkMeta, bytes] | None = None
        if local:
            try:
                payload = self.disk.get(key)
            except (NotFoundError, CorruptChunkError):
                got = self.remote.fetch(key) if self.remote is not None else None
                if got is None:
                    raise
                payload = got[1]
        else:
            got = self.remote.fetch(key) if self.remote is not None else None
            if got is None:
                raise NotFoundError(f"no chunk {key!r} in the remote tier")
            payload = got[1]
        try:
            if slim:  # never cached: the RAM tier holds whole states
                state = self._decode(payload, at=at, slim=True)
            else:
                state = self._decode(payload) if at is None else self._decode(payload, at)
        except CodecError as exc:
            if got is None:
                raise
            assert self.remote is not None
            self.remote.reject(key)
            raise CorruptChunkError(  # checked bytes that are no KV state here: never used
                f"chunk {key!r} from the remote tier does not decode ({exc.message})",
                "It will be recomputed from its tokens.",
            ) from None
        if got is not None:
            self._filled(got)
        if slim:
            return state, False
        with self._lock:  # a save() since this load began makes its state stale: not cached
            cached = self._gen.get(key, 0) == gen and self.ram.put(key, state)
        return state, cached

    def _filled(self, got: tuple[ChunkMeta, bytes]) -> None:
        """A chunk fetched from the remote tier (and decoded): saved to disk on a write-back
        thread when a slot is free at once (never waited for: the disk copy only saves the next
        fetch)."""
        meta, payload = got
        with self._lock:
            self._origin[meta.key] = "remote"
        if self.disk.readonly or not self._slots.acquire(blocking=False):
            return
        try:
            with self._lock:
                prev = self._saving.get(meta.key)
                fut = self._writers.submit(self._fill, meta, payload, prev)
                self._saving[meta.key] = fut
        except BaseException:
            self._slots.release()
            raise
        fut.add_done_callback(partial(self._saved, meta.key))

    def _fill(self, meta: ChunkMeta, payload: bytes, prev: Future[ChunkMeta] | None) -> ChunkMeta:
        if prev is not None:
            wait([prev])
        try:
            return self.disk.put(meta, payload)
        except Exception:  # locked by a writer, disk full…: the remote copy still serves it
            return meta

    def cancel(self) -> None:
        """Forget every prefetch not yet consumed (running ones finish and fill RAM)."""
        with self._lock:
            self._backlog.clear()
            for fut in self._reading.values():
                fut.cancel()
            self._reading.clear()

    # ---- writes ------------------------------------------------------------------------------

    def save(self, meta: ChunkMeta, blob: Any, *, cache: bool = False) -> None:
        """Queue ``blob`` to be encoded with ``meta.scheme`` and saved; blocks while
        ``max_pending`` saves are outstanding. ``cache`` also keeps ``blob`` in RAM as ready.
        """
        self._raise_first()
        if self.disk.readonly:  # a reader of read-only media: serve the state, store nothing
            with self._lock:
                self._gen[meta.key] = self._gen.get(meta.key, 0) + 1
                if cache:
                    self.ram.put(meta.key, blob)
                else:
                    self.ram.pop(meta.key)
            return
        self._slots.acquire()
        try:
            with self._lock:
                prev = self._saving.get(meta.key)
                fut = self._writers.submit(self._store, meta, blob, prev)
                self._saving[meta.key] = fut
                self._gen[meta.key] = self._gen.get(meta.key, 0) + 1
                stale = self._reading.pop(meta.key, None)
                if stale is not None:
                    stale.cancel()
                if cache:
                    self.ram.put(meta.key, blob)
                else:
                    self.ram.pop(meta.key)  # any cached state is stale now
        except BaseException:
            self._slots.release()
            raise
        fut.add_done_callback(partial(self._saved, meta.key))

    def _store(self, meta: ChunkMeta, blob: Any, prev: Future[ChunkMeta] | None) -> ChunkMeta:
        try:
            if prev is not None:
                wait([prev])  # same key: keep saves in order (its error is reported on its own)
            payload = self._encode(blob, meta.scheme)
            rec = self.disk.put(meta, payload)
            if self.remote is not None:
                self.remote.publish(rec, payload)  # after the commit, off the decode path
            return rec
        except StoreLockedError as exc:
            if self.disk.mode == "shared":
                return meta  # a reader beside a writer: not saved this time
            with self._lock:
                self._errors.append(exc)
            raise
        except BaseException as exc:
            with self._lock:  # recorded before the future completes, so flush() sees it
                self._errors.append(exc)
            raise

    def _saved(self, key: str, fut: Future[ChunkMeta]) -> None:
        self._slots.release()
        with self._lock:
            if self._saving.get(key) is fut:
                del self._saving[key]

    def _raise_first(self) -> None:
        with self._lock:
            errors, self._errors = self._errors, []
        if errors:
            raise errors[0]

    def flush(self) -> None:
        """Wait for every queued save, persist disk access times and stats, re-raise the first
        save error (further errors of the same flush are dropped)."""
        with self._lock:
            futures = list(self._saving.values())
        wait(futures)
        self._raise_first()
        self.disk.flush()

    def close(self) -> None:
        """Flush, then stop the worker threads (the DiskStore stays open)."""
        try:
            self.flush()
        finally:
            self.cancel()
            self._readers.shutdown(wait=True)
            self._writers.shutdown(wait=True)

    def __enter__(self) -> Pager:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
