"""Documents' location maps in the store's index (tables made by catalog.m005_locations), and
the look-up that citations use: where in its source a span or a chunk of a document is.

A map's offsets are characters of the extracted text, which is what ingest tokenizes; a chunk's
span is read from its recall passages (their offsets are in the same text).
"""

from __future__ import annotations

import re
import sqlite3
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cascade_cli.documents import CHAPTER, HEADING, PAGE, Extracted, Location, Mark, where
from cascade_cli.documents.catalog import Document
from cascade_cli.recall import tables as recall_index
from cascade_cli.recall.focus import unmarked


def save(conn: sqlite3.Connection, doc_id: int, source: Extracted) -> None:
    """Store (or replace) a version's location map. Caller commits."""
    conn.execute("DELETE FROM document_marks WHERE doc_id = ?", (doc_id,))
    starts = source.line_starts()
    blob = _blob(starts) if starts else None
    conn.execute(
        "INSERT OR REPLACE INTO document_sources (doc_id, format, chars, line_starts)"
        " VALUES (?, ?, ?, ?)",
        (doc_id, source.format, len(source.text), blob),
    )
    conn.executemany(
        "INSERT INTO document_marks (doc_id, seq, start, kind, label, level)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        [(doc_id, i, m.start, m.kind, m.label, m.level) for i, m in enumerate(source.marks)],
    )


def has_map(conn: sqlite3.Connection, doc_id: int) -> bool:
    """Whether the version has a location map (versions ingested before it was kept do not)."""
    try:
        row = conn.execute("SELECT 1 FROM document_sources WHERE doc_id = ?", (doc_id,))
        return row.fetchone() is not None
    except sqlite3.OperationalError:  # a store whose docs tables predate the map
        return False


def source_format(conn: sqlite3.Connection, doc_id: int) -> str | None:
    """ "pdf", "epub", "html", "markdown", "text" or "code"; None without a map."""
    try:
        row = conn.execute("SELECT format FROM document_sources WHERE doc_id = ?", (doc_id,))
        found = row.fetchone()
    except sqlite3.OperationalError:
        return None
    return str(found[0]) if found else None


def load(conn: sqlite3.Connection, doc_id: int) -> tuple[list[Mark], list[int]]:
    """A version's marks (by start) and line starts; both empty without a map."""
    try:
        src = conn.execute(
            "SELECT line_starts FROM document_sources WHERE doc_id = ?", (doc_id,)
        ).fetchone()
        rows = conn.execute(
            "SELECT start, kind, label, level FROM document_marks WHERE doc_id = ? ORDER BY seq",
            (doc_id,),
        ).fetchall()
    except sqlite3.OperationalError:
        return [], []
    marks = sorted((Mark(int(s), str(k), str(lb), int(lv)) for s, k, lb, lv in rows),
                   key=lambda m: m.start)  # fmt: skip
    return marks, _lines(src[0] if src else None)


def _blob(starts: list[int]) -> bytes:
    """Line starts as little-endian unsigned 64-bit integers."""
    out = array("Q", starts)
    if sys.byteorder == "big":
        out.byteswap()
    return out.tobytes()


def _lines(blob: bytes | None) -> list[int]:
    if not blob:
        return []
    out = array("Q")
    out.frombytes(blob)
    if sys.byteorder == "big":
        out.byteswap()
    return out.tolist()


def locate(conn: sqlite3.Connection, doc: Document, start: int, end: int) -> list[Location]:
    """Where the characters [start, end) of `doc`'s text are in its source: pages, chapter,
    headings, lines (documents.where). Empty for a version without a map."""
    marks, lines = load(conn, doc.id)
    if not marks and not lines:
        return []
    return where(marks, lines, start, end)


def chunk_span(conn: sqlite3.Connection, doc: Document, idx: int) -> tuple[int, int] | None:
    """The characters of `doc`'s text that chunk `idx` holds (from its recall passages; None
    for a chunk with no passages, e.g. whitespace only)."""
    cid = recall_index.corpus_id(conn, doc.owner)
    if cid is None:
        return None
    row = conn.execute(
        "SELECT MIN(start), MAX(start + length(text)) FROM recall_passages"
        " WHERE corpus = ? AND chunk = ?",
        (cid, idx),
    ).fetchone()
    return (int(row[0]), int(row[1])) if row and row[0] is not None else None


def locate_chunk(conn: sqlite3.Connection, doc: Document, idx: int) -> list[Location]:
    """Where chunk `idx` of `doc` is in its source (empty when unknown)."""
    span = chunk_span(conn, doc, idx)
    return locate(conn, doc, *span) if span else []


def quote_span(
    conn: sqlite3.Connection, doc: Document, idx: int, quote: str
) -> tuple[int, int] | None:
    """The characters of `doc`'s text a quote of chunk `idx` (or of the neighbour it runs on
    into) holds: found by its first words among the chunks' passages; None if not found."""
    core = unmarked(quote)[0]
    words = core.split()
    cid = recall_index.corpus_id(conn, doc.owner)
    if not words or cid is None:
        return None
    head = re.compile(r"\s+".join(map(re.escape, words[:6])))
    rows = conn.execute(
        "SELECT start, text FROM recall_passages WHERE corpus = ? AND chunk BETWEEN ? AND ?"
        " ORDER BY chunk, pidx",
        (cid, idx - 1, idx + 1),
    )
    for start, text in rows:
        found = head.search(text)
        if found:
            return int(start) + found.start(), int(start) + found.start() + len(core)
    return None


def sources(
    conn: sqlite3.Connection,
    doc: Document,
    chunks: Iterable[int],
    quoted: Iterable[int] = (),
    quotes: Mapping[int, str] | None = None,
) -> list[dict[str, Any]]:
    """The places an answer was given, in document order: one entry per run of adjacent
    chunks, as `{"doc", "path", "lines": [first, last] | None, "page": int | None,
    "section": str | None, "quoted": bool, "chunks": [...]}`. A quoted run's page and section
    are where its quote is (`quotes`: the quoted text by chunk; else its first chunk's). A
    version without a location map (ingested before maps were kept) cites its chunks with
    every location None."""
    marked = set(quoted)
    marks, lines_at = load(conn, doc.id)  # the map once, not once per chunk
    out: list[dict[str, Any]] = []
    for idx in sorted(set(chunks)):
        span = chunk_span(conn, doc, idx) if marks or lines_at else None
        locs = where(marks, lines_at, *span) if span else []
        lines = [int(x) for loc in locs if loc.kind == "lines" for x in loc.label.split("-")]
        pages = [int(loc.label) for loc in locs if loc.kind == PAGE and loc.label.isdigit()]
        sections = [loc.label for loc in locs if loc.kind in (CHAPTER, HEADING)]
        at = quote_span(conn, doc, idx, (quotes or {}).get(idx, "")) if idx in marked else None
        if at is not None and (marks or lines_at):  # where the quote itself is
            held = where(marks, lines_at, *at)
            pages = [int(x.label) for x in held if x.kind == PAGE and x.label.isdigit()] or pages
            sections = [x.label for x in held if x.kind in (CHAPTER, HEADING)] or sections
        prev = out[-1] if out else None
        if prev is not None and prev["chunks"][-1] == idx - 1:  # one run: widen it
            if lines and prev["lines"]:
                prev["lines"][1] = max(prev["lines"][1], lines[-1])
            if idx in marked and not prev["quoted"]:
                prev["page"] = pages[0] if pages else prev["page"]
                prev["section"] = sections[-1] if sections else prev["section"]
            prev["quoted"] = prev["quoted"] or idx in marked
            prev["chunks"].append(idx)
            continue
        out.append(
            {
                "doc": doc.name,
                "path": doc.path,
                "lines": [lines[0], lines[-1]] if lines else None,
                "page": pages[0] if pages else None,
                "section": sections[-1] if sections else None,
                "quoted": idx in marked,
                "chunks": [idx],
            }
        )
    return out


def cite(
    conn: sqlite3.Connection,
    documents: Sequence[Document],
    recalled: Iterable[tuple[str, int]],
    quoted: Iterable[tuple[str, int, str]] = (),
) -> list[dict[str, Any]]:
    """The sources of one answer, whatever asked it (`ask`, a chat turn, a served request):
    `sources` of each of `documents` whose chunks were `recalled` ((owner, chunk), in window
    order; a document in the order its first chunk came), `quoted` ((owner, chunk, the quoted
    text)) marked where the quote is."""
    by_owner = {d.owner: d for d in documents}
    recalled = [(o, i) for o, i in recalled if o in by_owner]
    marked = list(quoted)
    out: list[dict[str, Any]] = []
    for doc in dict.fromkeys(by_owner[o] for o, _ in recalled):
        mine = [i for o, i in recalled if o == doc.owner]
        texts = {i: t for o, i, t in marked if o == doc.owner}
        out += sources(conn, doc, mine, list(texts), texts)
    return out
