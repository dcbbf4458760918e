"""Stream a text through the model with a sliding window, saving each chunk's KV as it completes.

The window holds the prompt frame's prefix (an attention sink that `ask` reuses) followed by the
most recent chunks; each new chunk of `block_size` tokens attends to all of them. When the next
chunk does not fit, the oldest is dropped and the rest slide down. Saving a chunk copies its
cells into a scratch sequence and serializes that, so the window is never disturbed; encoding
and fsync run on the pager's write-back threads while the model computes the next chunk.

Resuming: an interrupted ingest of the same file (same sha256 and layout) keeps its committed
chunks; the window is rebuilt by restoring the last chunks from the store, then decoding goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cascade_cli.documents import Extracted, catalog, extract, locations
from cascade_cli.documents.frame import frame
from cascade_cli.documents.library import Library
from cascade_cli.documents.reindex import Notice, ensure_indexed, quiet
from cascade_cli.documents.sliding import SlidingWriter
from cascade_cli.engine import Context
from cascade_cli.errors import InputError
from cascade_cli.store import ChunkMeta
from cascade_cli.store.files import crash_point

_PIECE = 16_384  # characters tokenized at a time (split at paragraph boundaries)


@dataclass
class IngestStatus:
    """Progress reported after every chunk."""

    chars_done: int
    chars_total: int
    tokens: int
    chunks: int
    kv_bytes: int  # the KV states made so far, before the store quantizes them
    resumed_from: int
    elapsed: float


Progress = Callable[[IngestStatus], None]


def pieces(text: str) -> Iterator[tuple[int, str]]:
    """(char offset, piece) of ~_PIECE characters, split after a blank line where possible."""
    start = 0
    while start < len(text):
        end = min(len(text), start + _PIECE)
        if end < len(text):
            cut = text.rfind("\n\n", start + _PIECE // 2, end)
            end = cut + 2 if cut > 0 else end
        yield start, text[start:end]
        start = end


def chunks(ctx: Context, text: str, block: int) -> Iterator[tuple[list[int], int]]:
    """(tokens, chars consumed so far) per chunk of exactly `block` tokens (the last may be short)."""
    model = ctx.model
    pending: list[int] = []
    consumed = 0
    for offset, piece in pieces(text):
        pending.extend(model.tokenize(piece))
        consumed = offset + len(piece)
        while len(pending) >= block:
            yield pending[:block], consumed
            del pending[:block]
    if pending:
        yield pending, consumed


def _committed(lib: Library, doc: catalog.Document) -> list[ChunkMeta]:
    """Chunks 0..n-1 that are in the index (the contiguous prefix)."""
    metas = sorted(lib.disk.chunks(doc.owner), key=lambda m: m.index)
    done: list[ChunkMeta] = []
    for m in metas:
        if m.index != len(done):
            break
        done.append(m)
    return done


def start_version(
    lib: Library, path: Path, sha: str, name: str, window: int, prefix: int, named: bool
) -> tuple[catalog.Document, bool]:
    """The version row to fill: a resumable unfinished one, the finished one, or a new one.

    A finished version that lost chunk rows (e.g. dropped by store repair) is resumed, which
    recomputes them. A name derived from the file stem that already holds another file is
    refused rather than silently replaced (`named`: the user chose the name with --name).
    """
    cfg = lib.settings
    where = str(path.resolve())
    with lib.disk.transaction() as conn:
        prev = catalog.latest(conn, name)
        if prev is not None and not named and prev.path != where:
            raise InputError(
                f"the name {name!r} already holds {prev.path}",
                f"Pass --name to store {path} under another name, or `cascade rm {name}` first.",
            )
        same = (
            prev is not None
            and prev.sha256 == sha
            and prev.scheme == cfg.compression
            and prev.block_size == cfg.block_size
            and prev.window == window
            and prev.prefix_tokens == prefix
        )
        if prev is not None and same:
            if prev.status == "ready" and len(lib.disk.chunks(prev.owner)) >= prev.chunks:
                return prev, True
            conn.execute("UPDATE documents SET status = 'ingesting' WHERE id = ?", (prev.id,))
            return prev, False
        doc = catalog.create(
            conn,
            name=name,
            path=where,
            sha256=sha,
            scheme=cfg.compression,
            block_size=cfg.block_size,
            window=window,
            prefix_tokens=prefix,
        )
    return doc, False


def ingest(
    ctx: Context,
    lib: Library,
    path: Path,
    name: str,
    encoding: str,
    progress: Progress,
    named: bool = True,
    notice: Notice = quiet,
    source: Extracted | None = None,
    sweep: bool = True,
) -> catalog.Document:
    """Ingest one file (resuming if possible); older versions are dropped only after success.

    The file is read by documents.extract (PDF, EPUB, HTML, Markdown, text, code) unless its
    extracted `source` is given; its location map is stored with the version. `sweep`: finish
    interrupted removals first and drop replaced versions after (a collection does it once)."""
    cfg = lib.settings
    source = source or extract(path, encoding)
    text, sha = source.text, source.sha256
    fr = frame(ctx.model)
    limit = cfg.gpu_cache_size
    if len(fr.prefix) + cfg.block_size > limit:
        raise InputError(
            f"block size {cfg.block_size} does not fit a {limit}-token window",
            "Lower --block-size or raise --gpu-cache-size.",
        )
    if sweep:
        catalog.sweep(lib.disk)
    doc, finished = start_version(lib, path, sha, name, limit, len(fr.prefix), named)
    with lib.disk.transaction() as conn:  # a version from before location maps gets one
        if not finished or not locations.has_map(conn, doc.id):
            locations.save(conn, doc.id, source)
    if finished:  # nothing to decode; a store from before passage recall gets its passages
        ensure_indexed(ctx, lib, [doc], notice)
        return doc
    lib.disk.set_pinned(doc.owner, True)  # the disk budget never evicts an unfinished ingest
    writer = SlidingWriter(ctx, lib, doc)
    done = _committed(lib, doc)
    lib.recall.drop_from(doc.owner, len(done))
    missing = set(range(len(done))) - lib.recall.indexed(doc.owner)
    t0 = time.perf_counter()
    stored = sum(m.nbytes for m in done)
    chars_done = 0
    idx = -1
    for idx, (toks, consumed) in enumerate(chunks(ctx, text, cfg.block_size)):
        if idx < len(done):
            text = ctx.model.detokenize(toks)
            if idx in missing:  # its recall rows were lost to a crash between commits
                lib.recall.index(doc.owner, idx, text, chars_done)
            chars_done += len(text)
            if idx == len(done) - 1:
                writer.rebuild(done, chars_done)
            continue
        writer.add(idx, toks)
        stored += writer.last_nbytes
        progress(
            IngestStatus(
                consumed,
                len(text),
                writer.tokens_done,
                idx + 1,
                stored,
                len(done),
                time.perf_counter() - t0,
            )
        )
    lib.pager.flush()
    lib.recall.flush()
    crash_point("ingest_before_finish")
    # evictable once finished (LRU under a disk budget); unpinned first, so a crash between
    # the two leaves an unfinished document that the next run pins again, never a pinned one
    lib.disk.set_pinned(doc.owner, False)
    with lib.disk.transaction() as conn:
        catalog.progress(conn, doc, writer.tokens_done, idx + 1, len(text))
        catalog.finish(conn, doc)
    crash_point("ingest_after_finish")
    if sweep:
        catalog.sweep(lib.disk)  # drops the versions this one replaces
    return catalog.by_id(lib.disk.conn, doc.id)
