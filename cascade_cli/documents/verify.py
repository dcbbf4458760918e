"""`cascade verify`: the store's fsck, and its repair.

Checks: every chunk's file (present, exact size, CRC-32) and payload header (a cascade KV payload
whose cells and lowest position match the row); every data file against the index (torn
``.tmp`` writes, orphans); every document against its chunks (indices 0..n-1, contiguous token
ranges adding up to the document's, a text row per chunk) and chunks whose document is gone.

Repair: a damaged chunk is recomputed from its row's token ids in its own context (see
documents.recompute; the sink from the prompt prefix); a document whose rows are gone or
inconsistent is re-ingested from its source when that file is unchanged (resume recomputes only
what is missing), else dropped; chunks of vanished documents and unreferenced files are deleted.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cascade_cli import kv
from cascade_cli.documents import catalog
from cascade_cli.documents.frame import frame
from cascade_cli.documents.ingest import ingest
from cascade_cli.documents.library import Library
from cascade_cli.documents.recompute import recompute
from cascade_cli.documents.remote_source import held_remotely
from cascade_cli.documents.sink import OWNER as SINK
from cascade_cli.documents.sink import save_sink, sink_key
from cascade_cli.engine import Context
from cascade_cli.engine.live import Window
from cascade_cli.errors import CascadeError, CodecError
from cascade_cli.recall import tables as recall_index
from cascade_cli.store import ChunkMeta, DiskStore
from cascade_cli.store import repair as store_repair
from cascade_cli.store.disk import DATA
from cascade_cli.store.fsck import readable_chunks, scan_chunks, scan_files

CHUNK_KINDS = ("missing", "truncated", "checksum", "payload")


@dataclass
class Finding:
    """Something damaged: a chunk (``key``), a document (``doc``) or a file (``file``).
    ``action`` says what --repair did: recomputed, reingested, dropped or deleted."""

    kind: str
    detail: str
    key: str = ""
    doc: str = ""
    file: str = ""
    action: str = ""

    def line(self) -> str:
        what = f"chunk {self.key}" if self.key else f"file {self.file}" if self.file else ""
        what = what or f"document '{self.doc}'"
        if self.key and self.doc:
            what += f" of '{self.doc}'"
        return f"{what}: {self.detail}" + (f" → {self.action}" if self.action else "")


@dataclass
class Report:
    """What verify checked and found."""

    store: str
    chunks: int = 0
    documents: int = 0
    files: int | None = None  # None: not checked (a writer held the store)
    damaged: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.damaged

    def as_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "clean": self.clean,
            "checked": {"chunks": self.chunks, "documents": self.documents, "files": self.files},
            "damaged": [dataclasses.asdict(f) for f in self.damaged],
            "notes": self.notes,
        }


def payload_problem(meta: ChunkMeta, payload: bytes) -> str | None:
    """Whether the bytes are a cascade KV payload of this row's chunk. A recurrent or hybrid
    model's state is a snapshot of the whole prefix [0, pos + tokens) (window.prefix)."""
    try:
        whole = kv.layout_of(payload) in ("recurrent", "hybrid")
        if whole and kv.layout_of(payload) == "recurrent":
            return None  # no positions to check: the file's CRC is the check
        hdr = kv.info(payload).header
    except CodecError as exc:
        return f"its payload header is unreadable ({exc.message})"
    if whole:
        if hdr.n_cells != meta.pos + meta.n_tokens or (hdr.n_cells and hdr.positions.min()):
            return f"its snapshot holds {hdr.n_cells} cells for {meta.pos + meta.n_tokens} tokens"
        return None
    if hdr.n_cells != meta.n_tokens:
        return f"its payload holds {hdr.n_cells} cells for {meta.n_tokens} tokens"
    if hdr.n_cells and int(hdr.positions.min()) != meta.pos:
        return f"its payload starts at position {int(hdr.positions.min())}, not {meta.pos}"
    return None


def _doc_findings(store: DiskStore, doc: catalog.Document, notes: list[str]) -> list[Finding]:
    metas = readable_chunks(store, doc.owner)
    out: list[Finding] = []
    have = {m.index for m in metas}
    evicted = {i for i in range(doc.chunks) if doc.chunk_key(i) in store.evicted(doc.owner)}
    if evicted:
        notes.append(
            f"'{doc.name}': {len(evicted)} chunk(s) evicted by the disk budget "
            f"(`cascade ingest {doc.path}` recomputes them)"
        )
    remote = held_remotely(store.conn, doc) - have - evicted
    if remote:
        notes.append(
            f"'{doc.name}': {len(remote)} chunk(s) held by the remote tier only (paged in "
            "with --remote; `cascade verify --remote` checks them)"
        )
    evicted |= remote
    have |= evicted
    missing = sorted(set(range(doc.chunks)) - have)
    if missing:
        out.append(
            Finding("doc_chunks", f"chunk(s) {_span(missing)} not in the index", doc=doc.name)
        )
    extra = sorted(have - set(range(doc.chunks)))
    if extra:
        out.append(Finding("doc_chunks", f"chunk(s) {_span(extra)} beyond its end", doc=doc.name))
    end = 0
    for m in metas:
        if m.start != end and m.index - 1 in have and m.index - 1 not in evicted:
            out.append(Finding("doc_tokens", f"chunk {m.index} starts at token {m.start}, not {end}", doc=doc.name))  # fmt: skip
        end = m.end
    if not missing and not extra and doc.chunks - 1 not in evicted and end != doc.tokens:
        out.append(Finding("doc_tokens", f"chunks end at token {end}, not {doc.tokens}", doc=doc.name))  # fmt: skip
    no_text = sorted(set(range(doc.chunks)) - recall_index.chunks_indexed(store.conn, doc.owner))
    if no_text:
        out.append(Finding("doc_text", f"chunk(s) {_span(no_text)} have no recall passages", doc=doc.name))  # fmt: skip
    return out


def _span(ids: list[int]) -> str:
    return ", ".join(map(str, ids[:8])) + (f" … ({len(ids)})" if len(ids) > 8 else "")


def check(store: DiskStore, ref: str | None = None, *, files: bool = True) -> Report:
    """Verify the whole store, or one document (``ref``); ``files``: also look for unreferenced
    data files (only when no writer can be between writing a file and indexing it)."""
    report = Report(str(store.path))
    docs = catalog.documents(store.conn, include_partial=True)
    names = {d.owner: d.name for d in docs}
    if ref is not None:
        docs = [catalog.find(store.conn, ref)]
    report.chunks, damage = scan_chunks(
        store, None if ref is None else [docs[0].owner], payload_problem
    )
    for d in damage:
        where = {"key": d.key, "doc": names.get(d.owner, ""), "file": d.file}
        report.damaged.append(Finding(d.kind, d.detail, **where))
    for doc in docs:
        if doc.status != "ready":
            report.notes.append(f"'{doc.name}' v{doc.version}: unfinished ingest (rerun it)")
            continue
        report.documents += 1
        report.damaged += _doc_findings(store, doc, report.notes)
    if ref is None:
        for owner in store.owners():
            if owner.startswith("doc:") and owner not in names:
                n = len(
                    store.conn.execute("SELECT 1 FROM chunks WHERE owner = ?", (owner,)).fetchall()
                )
                report.damaged.append(Finding("orphan_chunks", f"{n} chunk(s) of a removed document", key=owner))  # fmt: skip
        if files:
            report.files, stray = scan_files(store)
            report.damaged += [Finding(d.kind, d.detail, file=d.file) for d in stray]
        else:
            report.notes.append("data files not checked against the index: a writer is running")
    return report


def repair(ctx: Context, lib: Library, report: Report) -> None:
    """Fix what ``check`` found (``lib`` open for writing, without the open-time repair);
    fills each finding's ``action``."""
    docs = {d.owner: d for d in catalog.documents(lib.conn, include_partial=True)}
    redo: dict[str, catalog.Document] = {}
    for f in report.damaged:
        if f.kind == "row":  # nothing in it can be trusted: drop it (its document is redone)
            owner = f.key.rsplit(":", 1)[0]
            lib.disk.delete(f.key)
            f.action = "dropped"
            if owner in docs:
                redo[owner] = docs[owner]
        elif f.kind in CHUNK_KINDS:
            f.action = _repair_chunk(ctx, lib, docs, f.key, redo)
        elif f.kind == "orphan_chunks":
            lib.disk.delete_owner(f.key)
            f.action = "dropped"
    lib.pager.flush()
    for f in report.damaged:
        if f.kind.startswith("doc_"):
            doc = next(d for d in docs.values() if d.name == f.doc and d.status == "ready")
            redo[doc.owner] = doc
    for owner, doc in redo.items():
        action = _reingest(ctx, lib, doc)
        for f in report.damaged:
            if (f.kind.startswith("doc_") and f.doc == doc.name) or f.action == f"redo:{owner}":
                f.action = action
    lib.pager.flush()
    gone = store_repair.repair(lib.disk.conn, lib.disk.path / DATA)  # unreferenced files
    for f in report.damaged:
        if f.kind in ("orphan_file", "temp_file"):
            f.action = "deleted" if f.file in gone.orphan_files + gone.temp_files else "gone"


def _repair_chunk(
    ctx: Context,
    lib: Library,
    docs: dict[str, catalog.Document],
    key: str,
    redo: dict[str, catalog.Document],
) -> str:
    meta = lib.disk.meta(key)
    prefix = frame(ctx.model).prefix
    if meta.owner == SINK and key == sink_key(prefix):
        win = Window(ctx, len(prefix))
        win.append(prefix)
        save_sink(lib, win, prefix, meta.scheme, force=True)
        win.reset()
        return "recomputed"
    doc = docs.get(meta.owner)
    if doc is None:
        lib.disk.delete(key)
        return "dropped"
    try:
        recompute(ctx, lib, doc, meta)
        return "recomputed"
    except CascadeError:  # e.g. a preceding chunk whose row is gone: rebuild the document
        lib.disk.delete(key)
        redo[doc.owner] = doc
        return f"redo:{doc.owner}"


def _reingest(ctx: Context, lib: Library, doc: catalog.Document) -> str:
    """Resume the document from its unchanged source (recomputing what is missing), or drop
    it when the source changed or is gone."""
    src = Path(doc.path)
    try:
        same = hashlib.sha256(src.read_bytes()).hexdigest() == doc.sha256
    except OSError:
        same = False
    if not same:
        lib.remove(doc)
        return "dropped (its source file changed or is gone)"
    with lib.disk.transaction() as conn:  # resume: recomputes missing chunks and passages
        conn.execute("UPDATE documents SET status = 'ingesting' WHERE id = ?", (doc.id,))
    saved = lib.settings
    lib.settings = dataclasses.replace(
        saved, gpu_cache_size=doc.window, block_size=doc.block_size, compression=doc.scheme
    )
    try:
        ingest(ctx, lib, src, doc.name, "utf-8", lambda s: None)
    except CascadeError as exc:  # e.g. a source in another encoding than UTF-8
        lib.remove(doc)
        return f"dropped (could not re-ingest it: {exc.message})"
    finally:
        lib.settings = saved
    return "reingested from its source"
