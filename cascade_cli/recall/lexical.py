"""BM25 recall over chunk text with SQLite FTS5."""

from __future__ import annotations

import re
import sqlite3

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "i",
        "if",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "she",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    ]
)


def query_terms(text: str) -> list[str]:
    """Content words of a question, lower-cased and de-duplicated in order."""
    seen: dict[str, None] = {}
    for word in re.findall(r"\w+", text.lower()):
        if word not in STOPWORDS and len(word) > 1:
            seen.setdefault(word, None)
    return list(seen)


def bm25(
    conn: sqlite3.Connection, doc_id: int, question: str, limit: int
) -> list[tuple[int, float]]:
    """(chunk index, score) best first; higher score is better."""
    terms = query_terms(question)
    if not terms:
        return []
    match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
    rows = conn.execute(
        "SELECT idx, -bm25(chunk_text) AS score FROM chunk_text"
        " WHERE chunk_text MATCH ? AND doc_id = ? ORDER BY score DESC LIMIT ?",
        (match, doc_id, limit),
    ).fetchall()
    return [(int(i), float(s)) for i, s in rows]
