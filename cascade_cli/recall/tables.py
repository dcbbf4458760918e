"""Recall's tables in the store's index: per-owner corpora of passages, FTS5 and embeddings.

Every owner (a document version ``doc:<id>``, a chat session) is its own corpus; one FTS5 table
holds every corpus's passages, each under a rowid that encodes (corpus, chunk, passage)
(`rowid`), so a corpus or a chunk is a rowid range: a query reads one corpus by range, or many
(a collection's files) at once, with BM25 statistics of the whole store — scores comparable
across documents. (One FTS5 table per corpus did not scale: a 10,000-file collection made
50,000 tables and 10,000 queries per question.)
FTS5 indexes each passage's searchable form (recall.scripts: Chinese, Japanese and Thai as
character bigrams).
Passages keep their chunk index and their character offset inside the chunk's text; their
embeddings (f16, unit length) are filled in later by the write-back side and may be missing.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cascade_cli.recall.passages import Passage, split
from cascade_cli.recall.scripts import searchable, unspaced
from cascade_cli.store import register_migrations

#: Owners that are documents (chunks of one continuous text), not conversations.
DOCUMENT = "doc:"
#: FTS5 tokenizer: Porter stemming over unicode61 (so "remembered" meets "remember").
TOKENIZER = "porter unicode61 remove_diacritics 2"


def m001_corpora(conn: sqlite3.Connection) -> None:
    """Corpora (one per owner) and their passages."""
    conn.execute(
        "CREATE TABLE recall_corpora (id INTEGER PRIMARY KEY, owner TEXT NOT NULL UNIQUE,"
        " gen INTEGER NOT NULL DEFAULT 0)"
    )
    conn.execute(
        """CREATE TABLE recall_passages (
            corpus INTEGER NOT NULL, chunk INTEGER NOT NULL, pidx INTEGER NOT NULL,
            start INTEGER NOT NULL, text TEXT NOT NULL, vec BLOB,
            PRIMARY KEY (corpus, chunk, pidx)
        ) WITHOUT ROWID"""
    )


def m002_unembedded(conn: sqlite3.Connection) -> None:
    """Passages still waiting for an embedding, found without reading every vector."""
    conn.execute(
        "CREATE INDEX recall_unembedded ON recall_passages (corpus, chunk, pidx) WHERE vec IS NULL"
    )


def m003_corpus_uid(conn: sqlite3.Connection) -> None:
    """A random id per corpus: a document id (and so its owner string and corpus row) can be
    reused after a removal, and a cache keyed by owner and change count alone then serves the
    removed document's vectors."""
    conn.execute("ALTER TABLE recall_corpora ADD COLUMN uid TEXT")
    conn.execute("UPDATE recall_corpora SET uid = lower(hex(randomblob(8)))")


def m004_corpus_uid_filled(conn: sqlite3.Connection) -> None:
    """Corpora made after m003 but before their insert set a uid had none (NULL compared equal
    across a removal and a re-creation)."""
    conn.execute("UPDATE recall_corpora SET uid = lower(hex(randomblob(8))) WHERE uid IS NULL")


def m005_empty_chunks(conn: sqlite3.Connection) -> None:
    """Chunks indexed with no passages (whitespace only): indexed once, not on every ask."""
    conn.execute(
        "CREATE TABLE recall_empty (corpus INTEGER NOT NULL, chunk INTEGER NOT NULL,"
        " PRIMARY KEY (corpus, chunk))"
    )


def m006_unspaced_scripts(conn: sqlite3.Connection) -> None:
    """Chinese, Japanese and Thai passages indexed before recall knew scripts without spaces:
    FTS5 held each run of such text as one token (no question matched it) and passages ran to
    ~20 sentences (no 。！？ ends). Each chunk holding such text is split again from its
    passages' text (their offsets give the gaps back; a gap of two or more characters becomes a
    blank line) and indexed again, once; its passages' embeddings are made again on the next
    search. Chunks of other text are not touched. (Its FTS5 rows are made by m007, which indexes
    every passage again.)"""
    for cid, _owner in conn.execute("SELECT id, owner FROM recall_corpora").fetchall():
        rows: dict[int, list[tuple[int, str]]] = {}
        for chunk, start, text in conn.execute(
            "SELECT chunk, start, text FROM recall_passages WHERE corpus = ? ORDER BY chunk, pidx",
            (cid,),
        ):
            rows.setdefault(int(chunk), []).append((int(start), str(text)))
        for chunk, parts in rows.items():
            if not any(unspaced(t) for _, t in parts):
                continue
            base = parts[0][0]
            text = ""
            for start, part in parts:
                gap = start - base - len(text)
                text += ("\n\n" if gap >= 2 else " " * gap) + part
            _put(conn, int(cid), chunk, [Passage(base + p.start, p.text) for p in split(text)])
        conn.execute("UPDATE recall_corpora SET gen = gen + 1 WHERE id = ?", (int(cid),))


def m007_one_fts_table(conn: sqlite3.Connection) -> None:
    """One FTS5 table for every corpus (rowids encode corpus, chunk and passage), and each
    corpus's count of indexed chunks (a collection's ask checks 10,000 files in one query); the
    per-corpus tables are dropped and every passage indexed again from recall_passages."""
    conn.execute(f"CREATE VIRTUAL TABLE recall_fts USING fts5(text, tokenize = '{TOKENIZER}')")
    conn.execute("ALTER TABLE recall_corpora ADD COLUMN chunks INTEGER NOT NULL DEFAULT 0")
    conn.execute("CREATE TABLE recall_state (id INTEGER PRIMARY KEY CHECK (id = 0), gen INTEGER)")
    conn.execute("INSERT INTO recall_state (id, gen) VALUES (0, 0)")
    for (cid,) in conn.execute("SELECT id FROM recall_corpora").fetchall():
        conn.execute(f"DROP TABLE IF EXISTS recall_fts_{int(cid)}")
    rebuild_fts(conn)


def rebuild_fts(conn: sqlite3.Connection) -> None:
    """Index every stored passage in FTS5 again, and count each corpus's indexed chunks."""
    conn.execute("DELETE FROM recall_fts")
    rows = conn.execute("SELECT corpus, chunk, pidx, text FROM recall_passages")
    conn.executemany(
        "INSERT INTO recall_fts (rowid, text) VALUES (?, ?)",
        ((rowid(int(c), int(k), int(i)), searchable(str(t))) for c, k, i, t in rows),
    )
    for (cid,) in conn.execute("SELECT id FROM recall_corpora").fetchall():
        _count(conn, int(cid))


register_migrations(
    "recall",
    [
        m001_corpora,
        m002_unembedded,
        m003_corpus_uid,
        m004_corpus_uid_filled,
        m005_empty_chunks,
        m006_unspaced_scripts,
        m007_one_fts_table,
    ],
)


@dataclass(frozen=True)
class Row:
    """One stored passage."""

    owner: str
    chunk: int
    pidx: int
    start: int
    text: str


#: A passage's FTS5 rowid: corpus << 40 | chunk << 16 | passage (a corpus is a rowid range).
CORPUS_SHIFT = 40
CHUNK_SHIFT = 16
#: Most passages in one chunk and most chunks in one corpus the rowid has room for.
MAX_PASSAGES = 1 << CHUNK_SHIFT
MAX_CHUNKS = 1 << (CORPUS_SHIFT - CHUNK_SHIFT)


def rowid(corpus: int, chunk: int, pidx: int) -> int:
    """The FTS5 rowid of a passage."""
    return (corpus << CORPUS_SHIFT) | (chunk << CHUNK_SHIFT) | pidx


def unrowid(value: int) -> tuple[int, int, int]:
    """(corpus, chunk, passage) of an FTS5 rowid."""
    return (
        value >> CORPUS_SHIFT,
        (value >> CHUNK_SHIFT) & (MAX_CHUNKS - 1),
        value & (MAX_PASSAGES - 1),
    )


def span(corpus: int, first: int = 0, last: int = MAX_CHUNKS - 1) -> tuple[int, int]:
    """The FTS5 rowid range of chunks `first`..`last` of a corpus (inclusive)."""
    return rowid(corpus, first, 0), rowid(corpus, last, MAX_PASSAGES - 1)


def bump(conn: sqlite3.Connection, cid: int | None) -> None:
    """Count a change to the corpus (readers cache vectors by this generation) and to the store
    (a reader whose store generation is unchanged need not look at any corpus's)."""
    if cid is not None:
        conn.execute("UPDATE recall_corpora SET gen = gen + 1 WHERE id = ?", (cid,))
    conn.execute("UPDATE recall_state SET gen = gen + 1")


def store_generation(conn: sqlite3.Connection) -> int:
    """How many changes the store's recall index has seen (any process)."""
    return int(conn.execute("SELECT gen FROM recall_state").fetchone()[0])


def _count(conn: sqlite3.Connection, cid: int) -> None:
    """Count the corpus's indexed chunks again (after chunks were dropped)."""
    conn.execute(
        "UPDATE recall_corpora SET chunks = (SELECT COUNT(*) FROM (SELECT chunk FROM"
        " recall_passages WHERE corpus = ?1 UNION SELECT chunk FROM recall_empty"
        " WHERE corpus = ?1)) WHERE id = ?1",
        (cid,),
    )


def generation(conn: sqlite3.Connection, owner: str) -> tuple[str, int] | None:
    """(corpus uid, change count) of `owner`, or None."""
    return generations(conn, [owner]).get(owner)


def generations(conn: sqlite3.Connection, owners: Sequence[str]) -> dict[str, tuple[str, int]]:
    """(corpus uid, change count) of each of `owners` that has a corpus."""
    return {str(o): (str(u), int(g)) for o, u, g in _of(conn, owners, "owner, uid, gen")}


def corpora(conn: sqlite3.Connection, owners: Sequence[str]) -> dict[int, str]:
    """Corpus id → owner, for each of `owners` that has a corpus."""
    return {int(c): str(o) for c, o in _of(conn, owners, "id, owner")}


def chunk_counts(conn: sqlite3.Connection, owners: Sequence[str]) -> dict[str, int]:
    """How many chunks of each of `owners` are indexed (one query for a whole collection)."""
    return {str(o): int(n) for o, n in _of(conn, owners, "owner, chunks")}


def _of(conn: sqlite3.Connection, owners: Sequence[str], columns: str) -> list[tuple[Any, ...]]:
    """`columns` of the corpora of `owners` (one query, however many)."""
    return conn.execute(
        f"SELECT {columns} FROM recall_corpora WHERE owner IN (SELECT value FROM json_each(?))",
        (owners_json(owners),),
    ).fetchall()


def corpus_id(conn: sqlite3.Connection, owner: str, create: bool = False) -> int | None:
    """The corpus of `owner` (created when `create`)."""
    row = conn.execute("SELECT id FROM recall_corpora WHERE owner = ?", (owner,)).fetchone()
    if row is not None:
        return int(row[0])
    if not create:
        return None
    cid = int(
        conn.execute(
            "INSERT INTO recall_corpora (owner, uid) VALUES (?, lower(hex(randomblob(8))))",
            (owner,),
        ).lastrowid
        or 0
    )
    bump(conn, None)  # readers that cached which owners have corpora look again
    return cid


def add(conn: sqlite3.Connection, owner: str, chunk: int, passages: Sequence[Passage]) -> None:
    """Index a chunk's passages (replacing any earlier ones of that chunk). Caller commits."""
    cid = corpus_id(conn, owner, create=True)
    assert cid is not None
    if not 0 <= chunk < MAX_CHUNKS or len(passages) > MAX_PASSAGES:
        raise ValueError(f"chunk {chunk} with {len(passages)} passages is past the index's room")
    known = conn.execute(
        "SELECT 1 FROM recall_passages WHERE corpus = ?1 AND chunk = ?2"
        " UNION ALL SELECT 1 FROM recall_empty WHERE corpus = ?1 AND chunk = ?2 LIMIT 1",
        (cid, chunk),
    ).fetchone()
    lo, hi = span(cid, chunk, chunk)
    conn.execute("DELETE FROM recall_fts WHERE rowid BETWEEN ? AND ?", (lo, hi))
    _put(conn, cid, chunk, passages)
    conn.executemany(
        "INSERT INTO recall_fts (rowid, text) VALUES (?, ?)",
        [(rowid(cid, chunk, i), searchable(p.text)) for i, p in enumerate(passages)],
    )
    if known is None:
        conn.execute("UPDATE recall_corpora SET chunks = chunks + 1 WHERE id = ?", (cid,))
    else:  # its earlier passages' vectors are gone
        bump(conn, cid)


def _put(conn: sqlite3.Connection, cid: int, chunk: int, passages: Sequence[Passage]) -> None:
    """A chunk's passage rows (not its FTS5 rows), replacing earlier ones."""
    conn.execute("DELETE FROM recall_passages WHERE corpus = ? AND chunk = ?", (cid, chunk))
    conn.execute("DELETE FROM recall_empty WHERE corpus = ? AND chunk = ?", (cid, chunk))
    if not passages:  # indexed, with nothing to find
        conn.execute("INSERT INTO recall_empty (corpus, chunk) VALUES (?, ?)", (cid, chunk))
    conn.executemany(
        "INSERT INTO recall_passages (corpus, chunk, pidx, start, text) VALUES (?, ?, ?, ?, ?)",
        [(cid, chunk, i, p.start, p.text) for i, p in enumerate(passages)],
    )


def drop_from(conn: sqlite3.Connection, owner: str, chunk: int) -> None:
    """Forget chunks `chunk`.. of an owner (an interrupted ingest redoes them)."""
    cid = corpus_id(conn, owner)
    if cid is None:
        return
    conn.execute("DELETE FROM recall_fts WHERE rowid BETWEEN ? AND ?", span(cid, chunk))
    conn.execute("DELETE FROM recall_passages WHERE corpus = ? AND chunk >= ?", (cid, chunk))
    conn.execute("DELETE FROM recall_empty WHERE corpus = ? AND chunk >= ?", (cid, chunk))
    _count(conn, cid)
    bump(conn, cid)


def drop_chunks(conn: sqlite3.Connection, owner: str, chunks: Sequence[int]) -> None:
    """Forget some chunks of an owner (a cache evicting them). Caller commits."""
    cid = corpus_id(conn, owner)
    if cid is None or not chunks:
        return
    conn.executemany(
        "DELETE FROM recall_fts WHERE rowid BETWEEN ? AND ?", [span(cid, c, c) for c in chunks]
    )
    for o in range(0, len(chunks), 500):
        part = list(chunks[o : o + 500])
        marks = ",".join("?" * len(part))
        for table in ("recall_passages", "recall_empty"):
            conn.execute(
                f"DELETE FROM {table} WHERE corpus = ? AND chunk IN ({marks})", (cid, *part)
            )
    _count(conn, cid)
    bump(conn, cid)


def forget(conn: sqlite3.Connection, owner: str) -> None:
    """Drop an owner's corpus entirely. Caller commits."""
    cid = corpus_id(conn, owner)
    if cid is None:
        return
    conn.execute("DELETE FROM recall_fts WHERE rowid BETWEEN ? AND ?", span(cid))
    conn.execute("DELETE FROM recall_passages WHERE corpus = ?", (cid,))
    conn.execute("DELETE FROM recall_empty WHERE corpus = ?", (cid,))
    conn.execute("DELETE FROM recall_corpora WHERE id = ?", (cid,))
    bump(conn, None)


def chunks_indexed(conn: sqlite3.Connection, owner: str) -> set[int]:
    """Chunk indices of `owner` that were indexed (with passages, or none: whitespace only)."""
    cid = corpus_id(conn, owner)
    if cid is None:
        return set()
    rows = conn.execute(
        "SELECT chunk FROM recall_passages WHERE corpus = ?"
        " UNION SELECT chunk FROM recall_empty WHERE corpus = ?",
        (cid, cid),
    )
    return {int(c) for (c,) in rows}


def owners_json(owners: Sequence[str]) -> str:
    return json.dumps(list(owners))


def passage_counts(conn: sqlite3.Connection, owner: str) -> dict[int, int]:
    """Passages per chunk of `owner`."""
    cid = corpus_id(conn, owner)
    if cid is None:
        return {}
    rows = conn.execute(
        "SELECT chunk, COUNT(*) FROM recall_passages WHERE corpus = ? GROUP BY chunk", (cid,)
    )
    return {int(c): int(n) for c, n in rows}
