"""Combine BM25 and key-based rankings, add neighbours, and fit the result to the window."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from cascade_cli.recall import keys, lexical

RECALL_MODES = ("bm25", "keys", "hybrid")


def _fuse(rankings: list[list[tuple[int, float]]]) -> list[int]:
    """Interleave best-first rankings (first of each, then second of each, …), de-duplicated.

    Rank fusion that rewards agreement (e.g. reciprocal-rank) demoted a strong single-method
    hit below chunks both methods ranked middling; interleaving keeps each method's best.
    """
    order: list[int] = []
    for rank in range(max((len(r) for r in rankings), default=0)):
        for ranking in rankings:
            if rank < len(ranking) and ranking[rank][0] not in order:
                order.append(ranking[rank][0])
    return order


def choose(
    conn: sqlite3.Connection,
    doc_id: int,
    n_chunks: int,
    question: str,
    mode: str,
    top_k: int,
    budget: int,
    question_summary: Callable[[], bytes] | None,
    head_dim: int,
    neighbors: int = 1,
) -> list[int]:
    """Chunk indices in document order: the top_k hits, then up to `neighbors` chunks on each
    side of every hit (following ones first), at most `budget` chunks in all."""
    rankings: list[list[tuple[int, float]]] = []
    if mode in ("bm25", "hybrid"):
        rankings.append(lexical.bm25(conn, doc_id, question, limit=max(top_k * 4, 16)))
    if mode in ("keys", "hybrid") and question_summary is not None:
        rows = conn.execute(
            "SELECT idx, summary FROM chunk_keys WHERE doc_id = ? ORDER BY idx", (doc_id,)
        ).fetchall()
        ranked = keys.rank(question_summary(), [(int(i), bytes(s)) for i, s in rows], head_dim)
        rankings.append(ranked[: max(top_k * 4, 16)])
    order = _fuse(rankings) if rankings else []
    if not order:
        order = list(range(min(n_chunks, budget)))  # nothing matched: the opening chunks
    hits = order[:top_k]
    wanted = list(hits)
    for d in range(1, neighbors + 1):
        for idx in hits:
            wanted += [idx + d, idx - d]
    chosen: list[int] = []
    for j in wanted:
        if 0 <= j < n_chunks and j not in chosen and len(chosen) < budget:
            chosen.append(j)
    return sorted(chosen)
