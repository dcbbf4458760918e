"""Documents in the store's index: versions and ingest status (their text is in recall's index)."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cascade_cli.errors import NotFoundError
from cascade_cli.recall import tables as recall_index
from cascade_cli.store import DiskStore, register_migrations
from cascade_cli.store.schema import has_table


def m001_documents(conn: sqlite3.Connection) -> None:
    """One row per ingested version of a file."""
    conn.execute(
        """CREATE TABLE documents (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL,
            path TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            version INTEGER NOT NULL,
            status TEXT NOT NULL,
            scheme TEXT NOT NULL,
            block_size INTEGER NOT NULL,
            window INTEGER NOT NULL,
            prefix_tokens INTEGER NOT NULL,
            tokens INTEGER NOT NULL DEFAULT 0,
            chunks INTEGER NOT NULL DEFAULT 0,
            chars INTEGER NOT NULL DEFAULT 0,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            UNIQUE (name, version)
        )"""
    )


def m002_chunk_text(conn: sqlite3.Connection) -> None:
    """Chunk text for BM25 recall, with character offsets into the source file."""
    conn.execute(
        "CREATE VIRTUAL TABLE chunk_text USING fts5("
        "text, doc_id UNINDEXED, idx UNINDEXED, char_start UNINDEXED, char_end UNINDEXED)"
    )


def m003_chunk_keys(conn: sqlite3.Connection) -> None:
    """Per-chunk summary keys for key-based recall."""
    conn.execute(
        "CREATE TABLE chunk_keys (doc_id INTEGER NOT NULL, idx INTEGER NOT NULL,"
        " summary BLOB NOT NULL, PRIMARY KEY (doc_id, idx))"
    )


def m004_passages(conn: sqlite3.Connection) -> None:
    """Chunk text moved to recall's per-document passage index; key summaries removed (they
    recalled the needle 0/20). Documents from before are re-indexed from their stored token ids
    on their first `ask` (or by re-ingesting)."""
    conn.execute("DROP TABLE IF EXISTS chunk_text")
    conn.execute("DROP TABLE IF EXISTS chunk_keys")


def m005_locations(conn: sqlite3.Connection) -> None:
    """Each version's location map (documents.locations): its format and line starts, and the
    marks where its pages, chapters and headings begin. Versions from before have none."""
    conn.execute(
        "CREATE TABLE document_sources (doc_id INTEGER PRIMARY KEY, format TEXT NOT NULL,"
        " chars INTEGER NOT NULL, line_starts BLOB)"
    )
    conn.execute(
        "CREATE TABLE document_marks (doc_id INTEGER NOT NULL, seq INTEGER NOT NULL,"
        " start INTEGER NOT NULL, kind TEXT NOT NULL, label TEXT NOT NULL,"
        " level INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (doc_id, seq)) WITHOUT ROWID"
    )


register_migrations(
    "docs", [m001_documents, m002_chunk_text, m003_chunk_keys, m004_passages, m005_locations]
)


@dataclass(frozen=True)
class Document:
    """One row of `documents`."""

    id: int
    name: str
    path: str
    sha256: str
    version: int
    status: str
    scheme: str
    block_size: int
    window: int
    prefix_tokens: int
    tokens: int
    chunks: int
    chars: int
    created: float
    updated: float

    @property
    def owner(self) -> str:
        """The owner string of this version's chunks in the chunk index."""
        return f"doc:{self.id}"

    def chunk_key(self, idx: int) -> str:
        return f"doc:{self.id}:{idx}"


_COLS = ", ".join(Document.__dataclass_fields__)


def has_tables(conn: sqlite3.Connection) -> bool:
    """False for a store that never held a document (its docs migrations not applied)."""
    return has_table(conn, "documents")


def _doc(row: tuple[Any, ...]) -> Document:
    return Document(*row)


def documents(
    conn: sqlite3.Connection,
    include_partial: bool = False,
    names: str | None = None,
    args: tuple[Any, ...] = (),
) -> list[Document]:
    """Ready document versions, optionally with unfinished ingests, by name then version;
    `names`: only those whose name this SQL query (with `args`) selects."""
    if not has_tables(conn):
        return []
    where = ["1"] if include_partial else ["status = 'ready'"]
    if names is not None:
        where.append(f"name IN ({names})")
    rows = conn.execute(
        f"SELECT {_COLS} FROM documents WHERE {' AND '.join(where)} ORDER BY name, version", args
    ).fetchall()
    return [_doc(r) for r in rows]


def resolved(ref: str) -> str:
    """`ref` as the absolute path ingest records."""
    return str(Path(ref).expanduser().resolve())


def find(conn: sqlite3.Connection, ref: str) -> Document:
    """The ready document named `ref`, or whose source path is `ref` (relative paths too)."""
    if has_tables(conn):
        row = conn.execute(
            f"SELECT {_COLS} FROM documents WHERE status = 'ready' AND (name = ? OR path IN (?, ?))"
            " ORDER BY version DESC LIMIT 1",
            (ref, ref, resolved(ref)),
        ).fetchone()
        if row:
            return _doc(row)
    raise NotFoundError(
        f"no ingested document named {ref!r}", f"Run `cascade ingest {ref}` or see `cascade docs`."
    )


def by_id(conn: sqlite3.Connection, doc_id: int) -> Document:
    row = conn.execute(f"SELECT {_COLS} FROM documents WHERE id = ?", (doc_id,)).fetchone()
    if row is None:
        raise NotFoundError(f"document version {doc_id} is gone", "See `cascade docs`.")
    return _doc(row)


def remove(disk: DiskStore, doc: Document) -> int:
    """Delete a version: catalog rows first (committed), then its chunks; bytes freed."""
    with disk.transaction() as conn:
        forget(conn, doc)
    return disk.delete_owner(doc.owner)


def sweep(disk: DiskStore) -> int:
    """Finish removals a crash interrupted: versions older than their name's newest ready one,
    and chunks of versions whose catalog row is gone. Returns bytes freed."""
    if not has_tables(disk.conn):
        return 0
    with disk.transaction() as conn:
        stale = [
            _doc(r)
            for r in conn.execute(
                f"SELECT {_COLS} FROM documents d WHERE EXISTS (SELECT 1 FROM documents n"
                " WHERE n.name = d.name AND n.status = 'ready' AND n.version > d.version)"
            ).fetchall()
        ]
        known = {f"doc:{i}" for (i,) in conn.execute("SELECT id FROM documents")}
        for table in ("document_marks", "document_sources"):  # location maps of removed rows
            conn.execute(f"DELETE FROM {table} WHERE doc_id NOT IN (SELECT id FROM documents)")
        for (owner,) in conn.execute("SELECT owner FROM recall_corpora").fetchall():
            if owner.startswith("doc:") and owner not in known:
                recall_index.forget(conn, owner)
    freed = sum(remove(disk, d) for d in stale)
    for owner in disk.owners():
        if owner.startswith("doc:") and owner not in known:
            freed += disk.delete_owner(owner)
    return freed


def latest(conn: sqlite3.Connection, name: str) -> Document | None:
    """The newest version of `name`, whatever its status."""
    row = conn.execute(
        f"SELECT {_COLS} FROM documents WHERE name = ? ORDER BY version DESC LIMIT 1", (name,)
    ).fetchone()
    return _doc(row) if row else None


def create(conn: sqlite3.Connection, **fields: Any) -> Document:
    """Insert a new version row with status 'ingesting'."""
    now = time.time()
    prev = latest(conn, fields["name"])
    version = prev.version + 1 if prev else 1
    cur = conn.execute(
        "INSERT INTO documents (name, path, sha256, version, status, scheme, block_size, window,"
        " prefix_tokens, created, updated) VALUES (?, ?, ?, ?, 'ingesting', ?, ?, ?, ?, ?, ?)",
        (
            fields["name"],
            fields["path"],
            fields["sha256"],
            version,
            fields["scheme"],
            fields["block_size"],
            fields["window"],
            fields["prefix_tokens"],
            now,
            now,
        ),
    )
    row = conn.execute(f"SELECT {_COLS} FROM documents WHERE id = ?", (cur.lastrowid,)).fetchone()
    return _doc(row)


def progress(conn: sqlite3.Connection, doc: Document, tokens: int, chunks: int, chars: int) -> None:
    """Record how far an ingest got (committed with the chunk's text)."""
    conn.execute(
        "UPDATE documents SET tokens = ?, chunks = ?, chars = ?, updated = ? WHERE id = ?",
        (tokens, chunks, chars, time.time(), doc.id),
    )


def finish(conn: sqlite3.Connection, doc: Document) -> None:
    conn.execute(
        "UPDATE documents SET status = 'ready', updated = ? WHERE id = ?", (time.time(), doc.id)
    )


def forget(conn: sqlite3.Connection, doc: Document) -> None:
    """Remove a version's catalog and recall rows (its chunks are deleted through the store)."""
    recall_index.forget(conn, doc.owner)
    conn.execute("DELETE FROM document_marks WHERE doc_id = ?", (doc.id,))
    conn.execute("DELETE FROM document_sources WHERE doc_id = ?", (doc.id,))
    conn.execute("DELETE FROM documents WHERE id = ?", (doc.id,))
