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
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from cascade_cli.errors import InputError
from cascade_cli.recall import index, lexical, semantic
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
        self.cache = semantic.VectorCache()
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
            index.add(conn, owner, chunk, passages)
        if self.semantic:
            self._jobs = [j for j in self._jobs if not j.done()]
            self._jobs.append(self._pool.submit(self._embed_owner, owner))
        return passages

    def _embed_owner(self, owner: str) -> None:
        emb = self.embedder()
        if emb is None:
            return
        while True:
            with self.disk.lock:
                rows = index.unembedded(self.disk.conn, owner, _BATCH)
            if not rows:
                return
            vecs = emb.embed([r.text for r in rows])
            with self.disk.transaction() as conn:
                index.set_vectors(conn, owner, rows, vecs)

    def indexed(self, owner: str) -> set[int]:
        """Chunk indices of `owner` with passages."""
        with self.disk.lock:
            return index.chunks_indexed(self.disk.conn, owner)

    def drop_from(self, owner: str, chunk: int) -> None:
        """Forget `owner`'s chunks from `chunk` on (an ingest about to redo them)."""
        with self.disk.transaction() as conn:
            index.drop_from(conn, owner, chunk)

    def forget(self, owner: str) -> None:
        """Drop an owner's recall index."""
        self.flush()
        with self.disk.transaction() as conn:
            index.forget(conn, owner)
        self.cache.drop(owner)

    def pending(self, owners: Sequence[str]) -> int:
        """Passages of `owners` still without an embedding."""
        with self.disk.lock:
            return sum(index.count_unembedded(self.disk.conn, o) for o in owners)

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

        def mine(hits: list[lexical.PassageHit]) -> list[lexical.PassageHit]:
            if scope is None:
                return hits
            return [h for h in hits if h.owner not in scope or h.chunk in scope[h.owner]]

        t0 = time.perf_counter()
        rankings: dict[str, list[lexical.PassageHit]] = {}
        if mode in ("hybrid", "bm25"):
            found: list[lexical.PassageHit] = []
            about: list[lexical.PassageHit] = []
            with self.disk.lock:
                for o in owners:
                    wide = limit if scope is None or o not in scope else 1 << 30
                    if subject:
                        hits, chunks = lexical.search_with_subject(self.disk.conn, o, query, wide)
                    else:
                        hits, chunks = lexical.search(self.disk.conn, o, query, wide), []
                    found += mine(hits)[:limit]
                    about += mine(chunks)
            rankings["bm25"] = sorted(found, key=lambda h: -h.score)
            if about:
                rankings["subject"] = sorted(about, key=lambda h: -h.score)
        t1 = time.perf_counter()
        self.check(mode)
        if mode in ("hybrid", "semantic") and self.semantic:
            emb = self.embedder()
            assert emb is not None
            self.flush()
            for owner in owners:
                self._embed_owner(owner)  # anything no write-back embedded (a killed ingest)
            qvec = emb.embed([query])[0]
            with self.disk.lock:
                found = [
                    h
                    for o in owners
                    for h in semantic.search(
                        self.disk.conn, self.cache, o, qvec, limit,
                        None if scope is None else scope.get(o),
                    )
                ]  # fmt: skip
            rankings["semantic"] = sorted(found, key=lambda h: -h.score)
        self.timings = {"lexical_s": t1 - t0, "semantic_s": time.perf_counter() - t1}
        return fuse(rankings)[:limit]

    def passage_texts(self, hits: Sequence[Hit]) -> list[str]:
        """The best passage of each hit, in order; a sentence a chunk edge cuts is given whole
        (joined with the part across the edge)."""
        with self.disk.lock:
            rows = [index.passage(self.disk.conn, h.owner, h.chunk, h.passage) for h in hits]
            return [index.whole(self.disk.conn, r) for r in rows if r is not None]

    def quote_text(
        self, hit: Hit, query: str, words: int, held: Container[int] | None = None
    ) -> str:
        """What ask, chat and the server quote of `hit` before `query`: its best passage (in a
        document with the passage after it, from the next chunk only where `held`, the chunks of
        hit.owner the window holds, has it: index.reading) cut to `words` words around the
        query's (recall.focus); '' when the passage is gone."""
        with self.disk.lock:
            row = index.passage(self.disk.conn, hit.owner, hit.chunk, hit.passage)
            text = "" if row is None else index.reading(self.disk.conn, row, held)
        return focus(text, query, words) if text else ""

    def passage_counts(self, owner: str) -> dict[int, int]:
        with self.disk.lock:
            return index.passage_counts(self.disk.conn, owner)
