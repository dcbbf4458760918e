"""Passage embeddings in the recall index: which passages still wait for one, storing them
(f16), and reading an owner set's vectors back in one query."""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from cascade_cli.recall.tables import Row, bump, corpora, owners_json


def unembedded(conn: sqlite3.Connection, owners: Sequence[str], limit: int = 1 << 30) -> list[Row]:
    """Passages of `owners` still without an embedding, in order (none at all in the store is
    answered from the partial index without looking at any owner)."""
    if conn.execute("SELECT 1 FROM recall_passages WHERE vec IS NULL LIMIT 1").fetchone() is None:
        return []
    rows = conn.execute(
        "SELECT c.owner, p.chunk, p.pidx, p.start, p.text FROM recall_corpora c"
        " JOIN recall_passages p INDEXED BY recall_unembedded ON p.corpus = c.id"
        " WHERE c.owner IN (SELECT value FROM json_each(?)) AND p.vec IS NULL"
        " ORDER BY c.id, p.chunk, p.pidx LIMIT ?",
        (owners_json(owners), limit),
    ).fetchall()
    return [Row(str(o), int(c), int(i), int(s), str(t)) for o, c, i, s, t in rows]


def count_unembedded(conn: sqlite3.Connection, owners: Sequence[str]) -> int:
    """How many passages of `owners` still wait for an embedding (read from the partial index)."""
    if conn.execute("SELECT 1 FROM recall_passages WHERE vec IS NULL LIMIT 1").fetchone() is None:
        return 0
    (n,) = conn.execute(
        "SELECT COUNT(*) FROM recall_corpora c"
        " JOIN recall_passages p INDEXED BY recall_unembedded ON p.corpus = c.id"
        " WHERE c.owner IN (SELECT value FROM json_each(?)) AND p.vec IS NULL",
        (owners_json(owners),),
    ).fetchone()
    return int(n)


def set_vectors(
    conn: sqlite3.Connection, rows: Sequence[Row], vecs: npt.NDArray[np.float32]
) -> None:
    """Store embeddings for `rows` (f16; rows of owners since dropped are skipped). Caller
    commits."""
    ids = {o: c for c, o in corpora(conn, sorted({r.owner for r in rows})).items()}
    conn.executemany(
        "UPDATE recall_passages SET vec = ? WHERE corpus = ? AND chunk = ? AND pidx = ?",
        [
            (v.astype(np.float16).tobytes(), ids[r.owner], r.chunk, r.pidx)
            for r, v in zip(rows, vecs, strict=True)
            if r.owner in ids
        ],
    )
    for cid in ids.values():
        bump(conn, cid)


def vectors(
    conn: sqlite3.Connection, owners: Sequence[str]
) -> dict[str, tuple[npt.NDArray[np.int32], npt.NDArray[np.float16]]]:
    """Each owner's ((n, 2) chunk/passage ids, (n, dim) f16 vectors) of its embedded passages,
    in document order (owners with none are left out); one query for all of them."""
    cids = corpora(conn, owners)
    rows = conn.execute(
        "SELECT corpus, chunk, pidx, vec FROM recall_passages WHERE corpus IN"
        " (SELECT value FROM json_each(?)) AND vec IS NOT NULL ORDER BY corpus, chunk, pidx",
        (json.dumps(list(cids)),),
    ).fetchall()
    if not rows:
        return {}
    n = len(rows)
    corpus = np.fromiter((r[0] for r in rows), np.int64, n)
    ids = np.empty((n, 2), dtype=np.int32)
    ids[:, 0] = np.fromiter((r[1] for r in rows), np.int32, n)
    ids[:, 1] = np.fromiter((r[2] for r in rows), np.int32, n)
    vecs = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float16).reshape(n, -1)
    edges = [0, *(np.flatnonzero(np.diff(corpus)) + 1).tolist(), n]
    return {cids[int(corpus[a])]: (ids[a:b], vecs[a:b]) for a, b in itertools.pairwise(edges)}
