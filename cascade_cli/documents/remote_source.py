"""The pager's remote source: content addresses for store keys, fetch and publish.

A chunk's address is derived from everything its KV depends on, so two machines that compute
the same chunk agree on it and a value is never found under the tokens of another chunk:

- the Redis key prefix holds a digest of the model fingerprint and the KV layout (llama.cpp
  version, payload format) — see :func:`namespace`;
- a document chunk's address chains, like the server's prompt blocks: chunk 0's parent is the
  document's root (the prompt prefix's tokens, the ingest window, block size and compression),
  chunk i's is chunk i-1's address, and each adds its position, token range and token ids;
- the prompt prefix (the sink) is addressed by its token ids (its store key is their digest);
- other owners register an addresser (the server's prompt blocks: their chain hash and the
  compression), and owners nobody addresses (chat sessions) are never published.

Chunks known only remotely (a document pulled from another machine, or local chunks evicted
from the disk) keep their records in ``remote_chunks``, so ``ask`` can plan with them and the
pager can find their addresses.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable

import numpy as np

from cascade_cli.config import Settings
from cascade_cli.documents import catalog
from cascade_cli.documents.frame import frame
from cascade_cli.engine import Context, Model
from cascade_cli.errors import CorruptChunkError, NotFoundError
from cascade_cli.store import ChunkMeta, DiskStore, register_migrations
from cascade_cli.store.address import address as content_address
from cascade_cli.store.remote import Record, RemoteTier
from cascade_cli.store.schema import has_table

log = logging.getLogger("cascade.remote")

#: addresser(key, meta or None) -> the content digest of that chunk, or None (not shared).
Addresser = Callable[[str, ChunkMeta | None], str | None]


def m001_remote_chunks(conn: sqlite3.Connection) -> None:
    """Records of document chunks whose bytes may be only in the remote tier."""
    conn.execute(
        """CREATE TABLE remote_chunks (
            key TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            stamp REAL NOT NULL,
            idx INTEGER NOT NULL,
            tok_start INTEGER NOT NULL,
            tok_end INTEGER NOT NULL,
            tokens BLOB NOT NULL,
            pos INTEGER NOT NULL,
            scheme TEXT NOT NULL,
            address TEXT NOT NULL
        )"""
    )
    conn.execute("CREATE INDEX remote_chunks_owner ON remote_chunks (owner, idx)")


register_migrations("remote", [m001_remote_chunks])


def namespace(fingerprint: str, layout: dict[str, tuple[str, ...]]) -> str:
    """The key prefix's digest: the model and the KV layout this build writes."""
    return content_address(
        "cascade-kv", fingerprint, *(f"{k}={v[0]}" for k, v in sorted(layout.items()))
    )


def doc_root(doc: catalog.Document, prefix: list[int]) -> str:
    """The parent of a document's chunk 0: the prompt prefix it follows and how it was cut."""
    return content_address("doc", prefix, doc.window, doc.block_size, doc.scheme, doc.prefix_tokens)


def chunk_address(parent: str, meta: ChunkMeta) -> str:
    """A document chunk's address from its parent's."""
    return content_address(parent, meta.pos, meta.start, meta.end, meta.tokens)


def held_remotely(conn: sqlite3.Connection, doc: catalog.Document) -> set[int]:
    """Indices of ``doc``'s chunks recorded as fetchable from the remote tier."""
    if not has_table(conn, "remote_chunks"):
        return set()
    rows = conn.execute(
        "SELECT idx FROM remote_chunks WHERE owner = ? AND stamp = ?", (doc.owner, doc.created)
    )
    return {int(i) for (i,) in rows}


def doc_key(key: str) -> tuple[int, int] | None:
    """(document id, chunk index) of a ``doc:<id>:<idx>`` key, else None."""
    parts = key.split(":")
    if len(parts) == 3 and parts[0] == "doc" and parts[1].isdigit() and parts[2].isdigit():
        return int(parts[1]), int(parts[2])
    return None


class RemoteLink:
    """Maps store keys to addresses and moves chunks between the pager and the remote tier."""

    def __init__(self, disk: DiskStore, model: Model, tier: RemoteTier) -> None:
        self.disk = disk
        self.tier = tier
        self.prefix = frame(model).prefix
        self._lock = threading.Lock()
        self._chains: dict[tuple[int, float], list[str]] = {}  # (doc id, created) -> addresses
        self.addressers: dict[str, Addresser] = {"doc:": self._doc, "sink:": _sink}

    def register(self, prefix: str, fn: Addresser) -> None:
        """Share the chunks whose keys start with ``prefix``, addressed by ``fn``."""
        self.addressers[prefix] = fn

    def address(self, key: str, meta: ChunkMeta | None = None) -> str | None:
        """The content address of ``key`` (``meta``: its record, when the caller has it)."""
        for prefix, fn in self.addressers.items():
            if key.startswith(prefix):
                try:
                    return fn(key, meta)
                except (NotFoundError, CorruptChunkError, sqlite3.Error) as exc:
                    log.debug("no address for %s: %s", key, exc)
                    return None
        return None

    # ---- documents ---------------------------------------------------------------------------

    def _doc(self, key: str, meta: ChunkMeta | None) -> str | None:
        ids = doc_key(key)
        if ids is None:
            return None
        with self.disk.lock:
            doc = catalog.by_id(self.disk.conn, ids[0])
        return self.chain(doc, ids[1], meta)

    def chain(self, doc: catalog.Document, idx: int, meta: ChunkMeta | None = None) -> str | None:
        """Chunk ``idx``'s address: the chain over chunks 0..idx (records from the disk, the
        remote records, or ``meta`` for chunk idx itself), remembered per document version."""
        with self._lock:
            chain = self._chains.setdefault((doc.id, doc.created), [])
            while len(chain) <= idx:
                j = len(chain)
                m = meta if (j == idx and meta is not None) else self.record(doc, j)
                if m is None:
                    return None
                chain.append(chunk_address(chain[-1] if chain else doc_root(doc, self.prefix), m))
            return chain[idx]

    def record(self, doc: catalog.Document, idx: int) -> ChunkMeta | None:
        """Chunk ``idx`` of ``doc``: its disk record, else its remote one, else None."""
        try:
            return self.disk.meta(doc.chunk_key(idx))
        except (NotFoundError, CorruptChunkError):
            return self.held(doc, idx)

    def held(self, doc: catalog.Document, idx: int) -> ChunkMeta | None:
        """The record of chunk ``idx`` of ``doc`` held only by the remote tier, or None."""
        key = doc.chunk_key(idx)
        with self.disk.lock:
            row = self.disk.conn.execute(
                "SELECT idx, tok_start, tok_end, tokens, pos, scheme FROM remote_chunks"
                " WHERE key = ? AND stamp = ?",
                (key, doc.created),
            ).fetchone()
        if row is None:
            return None
        i, s, e, toks, pos, scheme = row
        return ChunkMeta(key, doc.owner, i, s, e, np.frombuffer(toks, "<i4"), pos, scheme)

    def remember(self, doc: catalog.Document, metas: list[ChunkMeta], addresses: list[str]) -> None:
        """Record chunks of ``doc`` as fetchable from the remote tier (caller commits)."""
        with self.disk.transaction() as conn:
            conn.execute("DELETE FROM remote_chunks WHERE owner = ? AND stamp != ?",
                         (doc.owner, doc.created))  # fmt: skip
            conn.executemany(
                "INSERT OR REPLACE INTO remote_chunks (key, owner, stamp, idx, tok_start, tok_end,"
                " tokens, pos, scheme, address) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (m.key, doc.owner, doc.created, m.index, m.start, m.end, m.tokens.tobytes(),
                     m.pos, m.scheme, a)
                    for m, a in zip(metas, addresses, strict=True)
                ],
            )  # fmt: skip

    def forget(self, owner: str) -> None:
        """Drop the remote records of a removed document."""
        with self.disk.transaction() as conn:
            conn.execute("DELETE FROM remote_chunks WHERE owner = ?", (owner,))

    # ---- the pager's source ------------------------------------------------------------------

    def fetch(self, key: str) -> tuple[ChunkMeta, bytes] | None:
        """A chunk from the remote tier, checked against what this machine knows of it."""
        try:
            expect = self._expected(key)
            address = self.address(key, expect)
            if address is None:
                return None
            got = self.tier.get(address)
            if got is None:
                return None
            payload, rec = got
            if expect is not None and not _agrees(expect, rec):
                self.tier.stats.add("remote", "corrupt")
                self.tier.drop(address)
                return None
            owner, _, idx = key.rpartition(":")
            index = expect.index if expect is not None else int(idx) if idx.isdigit() else 0
            meta = ChunkMeta(
                key=key, owner=owner, index=index, start=rec.start, end=rec.end,
                tokens=rec.tokens, pos=rec.pos, scheme=rec.scheme, pinned=owner == "sink",
            )  # fmt: skip
            return meta, payload
        except Exception as exc:  # a remote fault is a miss, never an error of the request
            log.debug("remote fetch of %s failed: %s", key, exc)
            return None

    def _expected(self, key: str) -> ChunkMeta | None:
        ids = doc_key(key)
        if ids is None:
            return None
        with self.disk.lock:
            doc = catalog.by_id(self.disk.conn, ids[0])
        return self.record(doc, ids[1])

    def publish(self, meta: ChunkMeta, payload: bytes) -> None:
        """Publish a chunk just committed to disk (from the write-back thread)."""
        try:
            address = self.address(meta.key, meta)
            if address is not None:
                self.tier.put(address, payload, record_of(meta))
        except Exception as exc:  # never fails a save
            log.debug("remote publish of %s failed: %s", meta.key, exc)

    def reject(self, key: str) -> None:
        """A fetched value passed its checks but is no KV state here: counted, dropped."""
        try:
            address = self.address(key)
            self.tier.stats.add("remote", "corrupt")
            if address is not None:
                self.tier.drop(address)
        except Exception as exc:
            log.debug("remote reject of %s failed: %s", key, exc)

    def close(self) -> None:
        self.tier.close()


def record_of(meta: ChunkMeta) -> Record:
    """What the remote tier stores about a chunk."""
    return Record(meta.start, meta.end, meta.pos, meta.scheme, meta.tokens)


def _agrees(expect: ChunkMeta, rec: Record) -> bool:
    return (
        expect.start == rec.start
        and expect.end == rec.end
        and expect.pos == rec.pos
        and expect.scheme == rec.scheme
        and np.array_equal(expect.tokens, rec.tokens)
    )


def _sink(key: str, meta: ChunkMeta | None) -> str:
    """The prompt prefix's state: its key is already the digest of its token ids."""
    return content_address("sink", key)


def link_for(
    cfg: Settings, ctx: Context, disk: DiskStore, layout: dict[str, tuple[str, ...]]
) -> RemoteLink | None:
    """The remote source the settings ask for (None when no remote cache URL is set)."""
    if not cfg.remote_cache_url:
        return None
    tier = RemoteTier(
        cfg.remote_cache_url, namespace(ctx.fingerprint(), layout), disk.stats,
        ttl=cfg.remote_cache_ttl,
    )  # fmt: skip
    tier.ping()  # warns once, now, when Redis is not there
    return RemoteLink(disk, ctx.model, tier)
