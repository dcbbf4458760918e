"""Recall's tables in the store's index: per-owner corpora of passages, FTS5 and embeddings.

Every owner (a document version ``doc:<id>``, a chat session) is its own corpus with its own
FTS5 table, so BM25's statistics never mix documents or versions and a query reads one corpus.
FTS5 indexes each passage's searchable form (recall.scripts: Chinese, Japanese and Thai as
character bigrams).
Passages keep their chunk index and their character offset inside the chunk's text; their
embeddings (f16, unit length) are filled in later by the write-back side and may be missing.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
from collections.abc import Container, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from cascade_cli.recall.passages import Passage, split
from cascade_cli.recall.scripts import searchable, unspaced
from cascade_cli.store import register_migrations

#: Owners that are documents (chunks of one continuous text), not conversations.
DOCUMENT = "doc:"
#: A sentence's end (closing quotes and brackets after it allowed).
_ENDS = re.compile(r"[.!?。！？][\"'”’)\]」』）]*\s*$")
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
    search. Chunks of other text are not touched."""
    for cid, owner in conn.execute("SELECT id, owner FROM recall_corpora").fetchall():
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
            add(conn, str(owner), chunk, [Passage(base + p.start, p.text) for p in split(text)])
        _bump(conn, int(cid))


register_migrations(
    "recall",
    [
        m001_corpora,
        m002_unembedded,
        m003_corpus_uid,
        m004_corpus_uid_filled,
        m005_empty_chunks,
        m006_unspaced_scripts,
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


def fts_table(corpus: int) -> str:
    return f"recall_fts_{int(corpus)}"


def _bump(conn: sqlite3.Connection, cid: int) -> None:
    """Count a change to the corpus (readers cache vectors by this generation)."""
    conn.execute("UPDATE recall_corpora SET gen = gen + 1 WHERE id = ?", (cid,))


def generation(conn: sqlite3.Connection, owner: str) -> tuple[str, int] | None:
    """(corpus uid, change count) of `owner`, or None."""
    row = conn.execute("SELECT uid, gen FROM recall_corpora WHERE owner = ?", (owner,)).fetchone()
    return (str(row[0]), int(row[1])) if row else None


def corpus_id(conn: sqlite3.Connection, owner: str, create: bool = False) -> int | None:
    """The corpus of `owner` (created with its FTS5 table when `create`)."""
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
    conn.execute(
        f"CREATE VIRTUAL TABLE {fts_table(cid)} USING fts5("
        f"text, chunk UNINDEXED, pidx UNINDEXED, tokenize = '{TOKENIZER}')"
    )
    return cid


def add(conn: sqlite3.Connection, owner: str, chunk: int, passages: Sequence[Passage]) -> None:
    """Index a chunk's passages (replacing any earlier ones of that chunk). Caller commits."""
    cid = corpus_id(conn, owner, create=True)
    assert cid is not None
    table = fts_table(cid)
    conn.execute(f"DELETE FROM {table} WHERE chunk = ?", (chunk,))
    conn.execute("DELETE FROM recall_passages WHERE corpus = ? AND chunk = ?", (cid, chunk))
    conn.execute("DELETE FROM recall_empty WHERE corpus = ? AND chunk = ?", (cid, chunk))
    if not passages:  # indexed, with nothing to find
        conn.execute("INSERT INTO recall_empty (corpus, chunk) VALUES (?, ?)", (cid, chunk))
    for i, p in enumerate(passages):
        conn.execute(
            "INSERT INTO recall_passages (corpus, chunk, pidx, start, text) VALUES (?, ?, ?, ?, ?)",
            (cid, chunk, i, p.start, p.text),
        )
        conn.execute(
            f"INSERT INTO {table} (text, chunk, pidx) VALUES (?, ?, ?)",
            (searchable(p.text), chunk, i),
        )


def drop_from(conn: sqlite3.Connection, owner: str, chunk: int) -> None:
    """Forget chunks `chunk`.. of an owner (an interrupted ingest redoes them)."""
    cid = corpus_id(conn, owner)
    if cid is None:
        return
    conn.execute(f"DELETE FROM {fts_table(cid)} WHERE chunk >= ?", (chunk,))
    conn.execute("DELETE FROM recall_passages WHERE corpus = ? AND chunk >= ?", (cid, chunk))
    conn.execute("DELETE FROM recall_empty WHERE corpus = ? AND chunk >= ?", (cid, chunk))
    _bump(conn, cid)


def drop_chunks(conn: sqlite3.Connection, owner: str, chunks: Sequence[int]) -> None:
    """Forget some chunks of an owner (a cache evicting them). Caller commits."""
    cid = corpus_id(conn, owner)
    if cid is None or not chunks:
        return
    for o in range(0, len(chunks), 500):
        part = list(chunks[o : o + 500])
        marks = ",".join("?" * len(part))
        conn.execute(f"DELETE FROM {fts_table(cid)} WHERE chunk IN ({marks})", part)
        for table in ("recall_passages", "recall_empty"):
            conn.execute(
                f"DELETE FROM {table} WHERE corpus = ? AND chunk IN ({marks})", (cid, *part)
            )
    _bump(conn, cid)


def forget(conn: sqlite3.Connection, owner: str) -> None:
    """Drop an owner's corpus entirely. Caller commits."""
    cid = corpus_id(conn, owner)
    if cid is None:
        return
    conn.execute(f"DROP TABLE IF EXISTS {fts_table(cid)}")
    conn.execute("DELETE FROM recall_passages WHERE corpus = ?", (cid,))
    conn.execute("DELETE FROM recall_empty WHERE corpus = ?", (cid,))
    conn.execute("DELETE FROM recall_corpora WHERE id = ?", (cid,))


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


def unembedded(conn: sqlite3.Connection, owner: str, limit: int = 1 << 30) -> list[Row]:
    """Passages of `owner` still without an embedding, in order."""
    cid = corpus_id(conn, owner)
    if cid is None:
        return []
    rows = conn.execute(
        "SELECT chunk, pidx, start, text FROM recall_passages INDEXED BY recall_unembedded"
        " WHERE corpus = ? AND vec IS NULL ORDER BY chunk, pidx LIMIT ?",
        (cid, limit),
    ).fetchall()
    return [Row(owner, int(c), int(i), int(s), str(t)) for c, i, s, t in rows]


def count_unembedded(conn: sqlite3.Connection, owner: str) -> int:
    """How many passages of `owner` still wait for an embedding (read from the partial index)."""
    cid = corpus_id(conn, owner)
    if cid is None:
        return 0
    (n,) = conn.execute(
        "SELECT COUNT(*) FROM recall_passages INDEXED BY recall_unembedded"
        " WHERE corpus = ? AND vec IS NULL",
        (cid,),
    ).fetchone()
    return int(n)


def set_vectors(
    conn: sqlite3.Connection, owner: str, rows: Sequence[Row], vecs: npt.NDArray[np.float32]
) -> None:
    """Store embeddings for `rows` (f16). Caller commits."""
    cid = corpus_id(conn, owner)
    if cid is None:
        return
    conn.executemany(
        "UPDATE recall_passages SET vec = ? WHERE corpus = ? AND chunk = ? AND pidx = ?",
        [
            (v.astype(np.float16).tobytes(), cid, r.chunk, r.pidx)
            for r, v in zip(rows, vecs, strict=True)
        ],
    )
    _bump(conn, cid)


def vectors(
    conn: sqlite3.Connection, owner: str
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float16]]:
    """((n, 2) chunk/passage ids, (n, dim) f16 vectors) of the owner's embedded passages, in
    document order."""
    rows = conn.execute(
        "SELECT p.chunk, p.pidx, p.vec FROM recall_passages p JOIN recall_corpora c"
        " ON c.id = p.corpus WHERE c.owner = ? AND p.vec IS NOT NULL ORDER BY p.chunk, p.pidx",
        (owner,),
    ).fetchall()
    if not rows:
        return np.zeros((0, 2), dtype=np.int32), np.zeros((0, 0), dtype=np.float16)
    ids = np.array([(c, i) for c, i, _ in rows], dtype=np.int32)
    vecs = np.frombuffer(b"".join(v for _, _, v in rows), dtype=np.float16)
    return ids, vecs.reshape(len(rows), -1)


def passage(conn: sqlite3.Connection, owner: str, chunk: int, pidx: int) -> Row | None:
    """One passage (pidx -1: the chunk's last), or None."""
    row = conn.execute(
        "SELECT p.pidx, p.start, p.text FROM recall_passages p JOIN recall_corpora c"
        " ON c.id = p.corpus WHERE c.owner = ? AND p.chunk = ? AND (p.pidx = ? OR ? < 0)"
        " ORDER BY p.pidx DESC LIMIT 1",
        (owner, chunk, pidx, pidx),
    ).fetchone()
    return Row(owner, chunk, int(row[0]), int(row[1]), str(row[2])) if row else None


def whole(conn: sqlite3.Connection, row: Row) -> str:
    """`row`'s text, joined with the passage across its chunk's edge where its sentence runs on
    over it (a document's text continues there: the next chunk's first passage starts where this
    one ends). A conversation's turns are never joined."""
    return _join(_parts(conn, row))


def reading(conn: sqlite3.Connection, row: Row, held: Container[int] | None = None) -> str:
    """What a quote of `row` reads from: its whole text and, in a document, the passage after
    it. The sentence after the one that shares a question's words is often the one that
    answers it ("what errand took Frank to London?" — "…merely to have his hair cut"). The
    passage after may open the next chunk only where that chunk is in `held` (None: any) — a
    quote is copied from the chunks the window holds. A conversation's passage stays alone (the
    next may be another speaker's)."""
    parts = _parts(conn, row)
    if row.owner.startswith(DOCUMENT):
        last = parts[-1]
        after = passage(conn, row.owner, last.chunk, last.pidx + 1)
        if after is None and (held is None or last.chunk + 1 in held):
            after = passage(conn, row.owner, last.chunk + 1, 0)
        if after is not None:
            parts.append(after)
    return _join(parts)


def _parts(conn: sqlite3.Connection, row: Row) -> list[Row]:
    """`row` and the passages its sentence runs on into across a chunk edge (whole)."""
    parts = [row]
    if not row.owner.startswith(DOCUMENT):
        return parts
    if row.pidx == 0:
        before = passage(conn, row.owner, row.chunk - 1, -1)
        if before is not None and _runs_on(before, row):
            parts.insert(0, before)
    last = passage(conn, row.owner, row.chunk, -1)
    if last is not None and last.pidx == row.pidx:
        after = passage(conn, row.owner, row.chunk + 1, 0)
        if after is not None and _runs_on(row, after):
            parts.append(after)
    return parts


def _join(parts: Sequence[Row]) -> str:
    text = parts[0].text
    for a, b in itertools.pairwise(parts):
        text += (" " if b.start > _end(a) else "") + b.text
    return text


def _end(row: Row) -> int:
    return row.start + len(row.text)


def _runs_on(a: Row, b: Row) -> bool:
    """Whether passage `b` continues `a`'s unfinished sentence."""
    return 0 <= b.start - _end(a) <= 2 and not _ENDS.search(a.text)


def passage_counts(conn: sqlite3.Connection, owner: str) -> dict[int, int]:
    """Passages per chunk of `owner`."""
    cid = corpus_id(conn, owner)
    if cid is None:
        return {}
    rows = conn.execute(
        "SELECT chunk, COUNT(*) FROM recall_passages WHERE corpus = ? GROUP BY chunk", (cid,)
    )
    return {int(c): int(n) for c, n in rows}
