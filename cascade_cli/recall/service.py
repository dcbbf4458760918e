"""The recall service that ask, chat and the server share: index chunk text, search, forget.

Lexical indexing happens in the caller's transaction-sized step; embeddings are computed on one
background thread (the write-back side, at lower priority) and committed as they finish. A
search first embeds whatever passages of its owners are still without vectors (an ingest killed
before its embeddings landed, a store from before semantic recall), so recall is never silently
worse than the index promises.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Container, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from cascade_cli.errors import InputError
from cascade_cli.recall import lexical, semantic, tables, vectors
from cascade_cli.recall import rows as stored
from cascade_cli.recall.focus import focus
from cascade_cli.recall.passages import Passage, split
from cascade_cli.recall.select import Hit, fuse
from cascade_cli.store import DiskStore
from cascade_cli.store.prefetch import lower_priority

MODES = ("hybrid", "bm25", "semantic")
#: Scheduling niceness of the background embedding thread (it uses what decoding leaves idle).
EMBED_NICE = 10
#: Passages embedded per background job step.
_BATCH = 64


class Embeds(Protocol):
    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...

    def close(self) -> None: ...


class Recall:
    """One per open store. `lib` is a paging Library (needs `.disk` and `.embedder_factory`)."""

    def __init__(self, lib: Any) -> None:
        self.disk: DiskStore = lib.disk
        self._factory: Callable[[], Embeds] | None = getattr(lib, "embedder_factory", None)
        self._embedder: Embeds | None = None
        self._loading: Future[Embeds] | None = None
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="cascade-embed")
        self._pool.submit(lower_priority, EMBED_NICE)
        self._jobs: list[Future[None]] = []
        #: the lexical search of a hybrid one, beside the semantic ranking
        self._beside = ThreadPoolExecutor(1, thread_name_prefix="cascade-lexical")
        self._corpora: tuple[tuple[str, ...], int, dict[int, str]] | None = None
        self.cache = semantic.VectorCache(home=Path(self.disk.path) / "vectors")
        self.timings: dict[str, float] = {}

    # -- the embedding model -------------------------------------------------------------------
    @property
    def semantic(self) -> bool:
        """Whether an embedding model is configured."""
        return self._factory is not None

    def preload(self) -> None:
        """Start loading the embedding model in the background (ask calls this first)."""
        with self._lock:
            if self._factory is None or self._embedder is not None or self._loading is not None:
                return
            future: Future[Embeds] = Future()
            self._loading = future
            factory = self._factory

        def load() -> None:
            try:
                future.set_result(factory())
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=load, name="cascade-embed-load", daemon=True).start()

    def embedder(self) -> Embeds | None:
        """The embedding model, loaded on first use; None when none is configured."""
        self.preload()
        with self._lock:
            loading = self._loading
        if loading is not None and self._embedder is None:
            emb = loading.result()
            with self._lock:
                self._embedder = emb
                self._loading = None
        return self._embedder

    # -- indexing ------------------------------------------------------------------------------
    def index(self, owner: str, chunk: int, text: str, char_start: int = 0) -> list[Passage]:
        """Index one chunk's text (replacing an earlier version of it); embeddings follow on the
        background thread."""
        passages = [Passage(char_start + p.start, p.text) for p in split(text)]
        with self.disk.transaction() as conn:
            tables.add(conn, owner, chunk, passages)
        if self.semantic:
            self._jobs = [j for j in self._jobs if not j.done()]
            self._jobs.append(self._pool.submit(self._embed, [owner]))
        return passages

    def _embed(self, owners: Sequence[str]) -> None:
        """Embed the passages of `owners` that have no vector yet."""
        emb = self.embedder()
        if emb is None:
            return
        while True:
            with self.disk.lock:
                rows = vectors.unembedded(self.disk.conn, owners, _BATCH)
            if not rows:
                return
            vecs = emb.embed([r.text for r in rows])
            with self.disk.transaction() as conn:
                vectors.set_vectors(conn, rows, vecs)

    def indexed(self, owner: str) -> set[int]:
        """Chunk indices of `owner` with passages."""
        with self.disk.lock:
            return tables.chunks_indexed(self.disk.conn, owner)

    def indexed_counts(self, owners: Sequence[str]) -> dict[str, int]:
        """How many chunks of each of `owners` are indexed (one query for a collection)."""
        with self.disk.lock:
            return tables.chunk_counts(self.disk.conn, owners)

    def drop_from(self, owner: str, chunk: int) -> None:
        """Forget `owner`'s chunks from `chunk` on (an ingest about to redo them)."""
        with self.disk.transaction() as conn:
            tables.drop_from(conn, owner, chunk)

    def forget(self, owner: str) -> None:
        """Drop an owner's recall index."""
        self.flush()
        with self.disk.transaction() as conn:
            tables.forget(conn, owner)
        self.cache.drop(owner)

    def pending(self, owners: Sequence[str]) -> int:
        """Passages of `owners` still without an embedding."""
        with self.disk.lock:
            return vectors.count_unembedded(self.disk.conn, owners)

    def flush(self) -> None:
        """Wait for queued embedding work; re-raise its first error."""
        jobs, self._jobs = self._jobs, []
        for job in jobs:
            job.result()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._pool.shutdown(wait=True)
            self._beside.shutdown(wait=True)
            emb = self._embedder
            if emb is None and self._loading is not None:
                emb = self._loading.result()
            self._embedder = None
            if emb is not None:
                emb.close()

    # -- searching -----------------------------------------------------------------------------
    def check(self, mode: str) -> None:
        """Refuse a recall mode this service cannot run (semantic without an embedder)."""
        if mode == "semantic" and not self.semantic:
            raise InputError(
                "semantic recall needs an embedding model",
                "Pass --embed-model (e.g. minilm-l6) or use --recall bm25.",
            )

    def methods(self, mode: str) -> int:
        """How many rankings a search in `mode` fuses."""
        return 2 if mode == "hybrid" and self.semantic else 1

    def search(
        self,
        owners: Sequence[str],
        query: str,
        mode: str = "hybrid",
        limit: int = 32,
        subject: bool = False,
        scope: Mapping[str, Container[int]] | None = None,
    ) -> list[Hit]:
        """Chunks of `owners` for `query`, best first (fused passage rankings; with `subject`,
        chunks about the question's words add weight — `ask` fills a budget of many chunks).
        `scope`: the only chunks an owner may answer with, applied to each ranking before the
        fusion (an owner shared by several conversations ranks only the asker's chunks)."""

        t0 = time.perf_counter()
        self.check(mode)
        rankings: dict[str, list[lexical.PassageHit]] = {}
        stack = None
        if mode in ("hybrid", "semantic") and self.semantic:
            self.flush()
            self._embed(owners)  # anything no write-back embedded (a killed ingest)
            with self.disk.lock:
                stack = self.cache.get(self.disk.conn, owners)
        beside: Future[tuple[float, list[lexical.PassageHit], list[lexical.PassageHit]]] | None
        beside, took = None, 0.0
        found: list[lexical.PassageHit] = []
        about: list[lexical.PassageHit] = []
        if mode in ("hybrid", "bm25"):  # beside the semantic ranking: SQLite and BLAS
            args = (owners, query, limit, subject, scope)  # both let go of the GIL
            if stack is None:
                took, found, about = self._lexical(*args)
            else:
                beside = self._beside.submit(self._lexical, *args)
        t1 = time.perf_counter()
        near: list[lexical.PassageHit] = []
        if stack is not None:
            emb = self.embedder()
            assert emb is not None
            near = semantic.rank(stack, emb.embed([query])[0], limit, scope)
        t2 = time.perf_counter()
        if beside is not None:
            took, found, about = beside.result()
        if mode in ("hybrid", "bm25"):  # in this order: fusion breaks ties by it
            rankings["bm25"] = found
            if about:
                rankings["subject"] = about
        if stack is not None:
            rankings["semantic"] = near
        self.timings = {
            "lexical_s": took,
            "semantic_s": t2 - t1,
            "recall_s": time.perf_counter() - t0,
        }
        return fuse(rankings)[:limit]

    def _lexical(
        self,
        owners: Sequence[str],
        query: str,
        limit: int,
        subject: bool,
        scope: Mapping[str, Container[int]] | None,
    ) -> tuple[float, list[lexical.PassageHit], list[lexical.PassageHit]]:
        """(seconds, the BM25 ranking, the subject ranking); the owners' corpora are looked up
        once while the store's recall index is unchanged."""
        t0 = time.perf_counter()
        with self.disk.lock:
            conn = self.disk.conn
            seen = tables.store_generation(conn)
            key = tuple(owners)
            if self._corpora is None or self._corpora[:2] != (key, seen):
                self._corpora = (key, seen, tables.corpora(conn, owners))
            found, about = lexical.search(
                conn, owners, query, limit, subject=subject, scope=scope, cids=self._corpora[2]
            )
        return time.perf_counter() - t0, found, about

    def passage_texts(self, hits: Sequence[Hit]) -> list[str]:
        """The best passage of each hit, in order; a sentence a chunk edge cuts is given whole
        (joined with the part across the edge)."""
        with self.disk.lock:
            found = [stored.passage(self.disk.conn, h.owner, h.chunk, h.passage) for h in hits]
            return [stored.whole(self.disk.conn, r) for r in found if r is not None]

    def quote_text(
        self, hit: Hit, query: str, words: int, held: Container[int] | None = None
    ) -> str:
        """What ask, chat and the server quote of `hit` before `query`: its best passage (in a
        document with the passage after it, from the next chunk only where `held`, the chunks of
        hit.owner the window holds, has it: rows.reading) cut to `words` words around the
        query's (recall.focus); '' when the passage is gone."""
        with self.disk.lock:
            row = stored.passage(self.disk.conn, hit.owner, hit.chunk, hit.passage)
            text = "" if row is None else stored.reading(self.disk.conn, row, held)
        return focus(text, query, words) if text else ""

    def passage_counts(self, owner: str) -> dict[int, int]:
        with self.disk.lock:
            return tables.passage_counts(self.disk.conn, owner)
