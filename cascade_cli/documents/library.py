"""The store opened for one model: disk and RAM tiers, the pager with the KV codec, the catalog."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import numpy as np

from cascade_cli import kv
from cascade_cli.config import Settings
from cascade_cli.documents import catalog
from cascade_cli.documents.remote_source import RemoteLink, link_for
from cascade_cli.engine import Context, library_dir, llama_version
from cascade_cli.engine.embed import Embedder
from cascade_cli.engine.live import SCRATCH_SEQ
from cascade_cli.errors import (
    CodecError,
    CorruptChunkError,
    FingerprintMismatchError,
    ModelError,
    NotFoundError,
)
from cascade_cli.kv.codec import VERSION, VERSIONS
from cascade_cli.kv.pool import serial
from cascade_cli.kv.rope import Rope
from cascade_cli.recall import Recall
from cascade_cli.recall.plan import Source
from cascade_cli.registry import resolve_model
from cascade_cli.store import ChunkMeta, DiskStore, Pager, RamCache
from cascade_cli.store.index import Layout


def layout() -> Layout:
    """What a store's KV states depend on besides the model: the llama.cpp that wrote them and
    the payload format (this build writes the first value of each and reads all of them)."""
    formats = (VERSION, *sorted((v for v in VERSIONS if v != VERSION), reverse=True))
    return {"llama_cpp": (llama_version(),), "payload_format": tuple(map(str, formats))}


_FAMILIES = (
    "Llama, Qwen, Mistral, SmolLM (one cache), Gemma 2/3, gpt-oss (sliding window) or Mamba, "
    "Jamba, Granite 4 (recurrent, hybrid)"
)


def probe_layout(ctx: Context) -> None:
    """Refuse, before any work, a model whose memory cascade cannot store, in one line naming
    its family and what works instead: one token is decoded into the scratch sequence and its
    state read back through the codec (once per context)."""
    if ctx.layout_checked:
        return
    model = ctx.model
    arch = model.meta("general.architecture") or "unknown"
    try:
        ctx.decode(model.tokenize("a")[:1], 0, SCRATCH_SEQ, logits="none")
        blob = ctx.state_get(SCRATCH_SEQ)
        if blob.nbytes <= 8:  # the magic and sequence id alone: no memory at all
            raise ModelError(
                f"{model.path.name} ({arch}) keeps no KV cache: it is an embedding or encoder "
                "model, not one that generates text",
                f"Use a generative model: {_FAMILIES}.",
            )
        back = kv.decode(kv.encode(blob, "none", layout=ctx.layout))
        if not np.array_equal(back, blob):
            raise CodecError("its state does not survive a round trip")
    except CodecError as exc:
        raise ModelError(
            f"{model.path.name} ({arch}) keeps its KV cache in a layout cascade cannot store "
            f"({exc.message})",
            f"Use a model of a supported family: {_FAMILIES}.",
        ) from None
    finally:
        ctx.seq_rm(SCRATCH_SEQ)
    ctx.layout_checked = True


class _Encode:
    """The pager's encoder: a state blob of the context's cache layout (kv.sections)."""

    def __init__(self, layout: str) -> None:
        self.layout = layout

    def __call__(self, blob: Any, scheme: str) -> bytes:
        with serial():
            return kv.encode(blob, scheme, layout=self.layout)


class _Decode:
    """The pager's decoder: a chunk's state in the context's V layout (transposed unless flash
    attention is on, whatever it was saved with), moved to position `at` when asked and
    possible."""

    def __init__(self, rope: Rope | None, v_trans: bool) -> None:
        self.rope = rope
        self.v_trans = v_trans

    def __call__(self, payload: bytes, at: int | None = None, slim: bool = False) -> Any:
        at = at if self.rope is not None else None
        return kv.decode(payload, at=at, rope=self.rope, v_trans=self.v_trans, swa=not slim)


_TOLD: set[str] = set()  # models whose prefill notice this process printed


class Library:
    """Owns the DiskStore, RamCache, Pager and Recall for a context's fingerprint; close()
    flushes.

    ``mode="write"`` (ingest, repair) holds the store's writer lock; ``mode="shared"`` (ask, chat)
    reads beside a running writer and saves a recomputed chunk only when no writer runs.
    `embed_path`: the embedding model (resolved from settings when not given; none when
    settings say BM25 only)."""

    def __init__(
        self,
        settings: Settings,
        ctx: Context,
        timeout: float = 5.0,
        mode: Literal["write", "shared"] = "write",
        repair: bool = True,
        embed_path: Path | None = None,
        any_model: bool = False,
    ) -> None:
        """`any_model`: open a store created with another model too (chat sessions record the
        fingerprint of every chunk they write and restore only their own model's); documents
        and the sink keep refusing it."""
        kv.configure(library_dir())
        probe_layout(ctx)
        self.settings = settings
        self.ctx = ctx
        fingerprint = ctx.fingerprint()

        def open_store(check: str | None) -> DiskStore:
            return DiskStore.open(
                settings.disk_cache_path,
                check,
                budget=settings.disk_cache_budget,
                timeout=timeout,
                mode=mode,
                layout=layout(),
                repair=repair,
            )

        try:
            self.disk = open_store(fingerprint)
        except FingerprintMismatchError:
            if not any_model:
                raise
            self.disk = open_store(None)
            self.disk.fingerprint = fingerprint  # what the chunks written here are stamped with
        self.ram = RamCache(settings.memory_cache_size, stats=self.disk.stats)
        rope = ctx.model.rope() if ctx.model.rope_exact else None
        decode = _Decode(rope, v_trans=not ctx.flash_attn)
        self.remote: RemoteLink | None = None
        try:
            # the shared tier below disk, if set
            self.remote = link_for(self.settings, ctx, self.disk, layout())
        except BaseException:
            self.disk.close()
            raise
        self.pager = Pager(
            self.disk,
            self.ram,
            _Encode(ctx.layout),
            decode,
            writers=1,
            writer_nice=10,
            remote=self.remote,
        )
        self.embedder_factory: Callable[[], Embedder] | None = None
        wanted = settings.embed_model.lower() != "none" and settings.recall != "bm25"
        if embed_path is None and wanted:
            embed_path = resolve_model(settings.embed_model)
        if embed_path is not None:
            path = embed_path
            self.embedder_factory = lambda: Embedder(path, threads=1)
        self.recall = Recall(self)

    def prefill_notice(self) -> str | None:
        """Once per process, for a recurrent or hybrid model: how its recalled text comes in."""
        model = self.ctx.model
        if self.ctx.layout not in ("recurrent", "hybrid") or model.path.name in _TOLD:
            return None
        _TOLD.add(model.path.name)
        arch = model.meta("general.architecture") or "unknown"
        kind = "recurrent" if self.ctx.layout == "recurrent" else "hybrid (attention + recurrent)"
        return (
            f"{model.path.name} ({arch}) keeps {kind} state, which cannot be moved: recalled "
            "text is paged in by prefill (tier 'prefill'); conversations resume from exact "
            "prefix snapshots"
        )

    @property
    def conn(self) -> Any:
        return self.disk.conn

    def find(self, ref: str) -> catalog.Document:
        return catalog.find(self.disk.conn, ref)

    def chunk_meta(self, doc: catalog.Document, idx: int) -> ChunkMeta:
        """Chunk ``idx`` of ``doc``: its disk record, else (with a remote tier) the record of a
        chunk held remotely; NotFoundError if neither."""
        try:
            return self.disk.meta(doc.chunk_key(idx))
        except (NotFoundError, CorruptChunkError):
            meta = self.remote.held(doc, idx) if self.remote is not None else None
            if meta is None:
                raise
            return meta

    def sources(
        self, docs: Sequence[catalog.Document], frames: Mapping[str, int] | None = None
    ) -> list[Source]:
        """`docs` as sources the planner may recall from (`frames`: tokens around a document's
        excerpts, by owner): chunk sizes from the block size, chunks the disk budget evicted
        (and no remote tier holds) left out. One query for the evicted chunks of all of them;
        passage counts are read for the chunks the planner asks about."""
        evicted = self.disk.evicted_of([d.owner for d in docs])
        counts: dict[str, dict[int, int]] = {}

        def count(owner: str) -> dict[int, int]:
            if owner not in counts:
                counts[owner] = self.recall.passage_counts(owner)
            return counts[owner]

        frames = frames or {}
        return [
            Source(d.owner, d.name, d.chunks, d.block_size, d.tokens,
                   self._gone(d, evicted[d.owner]) if d.owner in evicted else frozenset(),
                   frames.get(d.owner, 0), count)
            for d in docs
        ]  # fmt: skip

    def _gone(self, doc: catalog.Document, keys: set[str]) -> frozenset[int]:
        """Chunks of `doc` among the evicted `keys` that no remote tier holds either."""
        return frozenset(
            i
            for i in range(doc.chunks)
            if doc.chunk_key(i) in keys and (self.remote is None or not self.remote.held(doc, i))
        )

    def remove(self, doc: catalog.Document) -> int:
        """Delete a document version (catalog and recall rows, then chunks) and its RAM-tier
        states."""
        self.ram.discard_prefix(doc.owner + ":")
        self.recall.flush()
        removed = catalog.remove(self.disk, doc)
        if self.remote is not None:  # after the catalog commit: a crash leaves no listed
            self.remote.forget(doc.owner)  # document without its remote records
        return removed

    def close(self) -> None:
        try:
            try:
                self.recall.close()
            finally:
                self.pager.close()
                if self.remote is not None:
                    self.remote.close()
        finally:
            self.disk.close()

    def __enter__(self) -> Library:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
