"""Lexical recall: BM25 over one corpus's passages (SQLite FTS5), with phrase and proximity
evidence, so a passage that holds the question's words together outranks one that repeats a
topic word many times."""

from __future__ import annotations

import itertools
import sqlite3
from dataclasses import dataclass

from cascade_cli.recall import index, scripts

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


def words(text: str) -> list[str]:
    """Lower-cased words of a text, in order; a run of Chinese, Japanese or Thai as its
    character bigrams (what the index holds for it: recall.scripts)."""
    return scripts.terms(text)


def query_terms(text: str) -> list[str]:
    """Content words of a question, lower-cased and de-duplicated in order."""
    seen: dict[str, None] = {}
    for word in words(text):
        if word not in STOPWORDS and len(word) > 1:
            seen.setdefault(word, None)
    return list(seen)


def _quote(*toks: str) -> str:
    return '"' + " ".join(t.replace('"', '""') for t in toks) + '"'


def fts_query(question: str) -> str:
    """An FTS5 expression: each content word, each adjacent word pair of the question that is
    not two stopwords (as a phrase), and all content words NEAR each other; any of them matches.
    BM25 weighs each phrase by its rarity, so a passage holding the question's phrasing scores
    far above one that only repeats its commonest word."""
    terms = query_terms(question)
    parts = [_quote(t) for t in terms]
    ws = words(question)
    pairs: dict[str, None] = {}
    for a, b in itertools.pairwise(ws):
        if not (a in STOPWORDS and b in STOPWORDS):
            pairs.setdefault(_quote(a, b), None)
    parts += [p for p in pairs if p not in parts]
    if len(terms) >= 2:
        near = " ".join(_quote(t) for t in terms[:8])
        parts.append(f"NEAR({near}, {8 + 2 * len(terms[:8])})")
    return " OR ".join(parts)


@dataclass(frozen=True)
class PassageHit:
    """A scored passage of a corpus (higher score is better)."""

    owner: str
    chunk: int
    pidx: int
    score: float


def _matches(
    conn: sqlite3.Connection, owner: str, question: str, limit: int
) -> list[tuple[int, int, float]]:
    """(chunk, passage, BM25 score) of `owner`'s passages matching `question`, best first."""
    cid = index.corpus_id(conn, owner)
    if cid is None or not query_terms(question):
        return []
    table = index.fts_table(cid)
    return conn.execute(
        f"SELECT chunk, pidx, -bm25({table}) AS score FROM {table}"
        f" WHERE {table} MATCH ? ORDER BY score DESC LIMIT ?",
        (fts_query(question), limit),
    ).fetchall()


def search(
    conn: sqlite3.Connection, owner: str, question: str, limit: int = 64
) -> list[PassageHit]:
    """Best passages of `owner` for `question`, best first (BM25 over that corpus only)."""
    return [
        PassageHit(owner, int(c), int(i), float(s))
        for c, i, s in _matches(conn, owner, question, limit)
    ]


def search_with_subject(
    conn: sqlite3.Connection, owner: str, question: str, limit: int = 64
) -> tuple[list[PassageHit], list[PassageHit]]:
    """(the best `limit` passages as `search` gives them; chunks by the sum of all their
    passages' scores — how much of the chunk is about the question's words — each with its best
    passage), from one query."""
    rows = _matches(conn, owner, question, -1)  # every match
    total: dict[int, float] = {}
    best: dict[int, int] = {}
    for c, i, s in rows:  # best first: a chunk's first row is its best passage
        total[c] = total.get(c, 0.0) + s
        best.setdefault(c, i)
    hits = [PassageHit(owner, int(c), int(i), float(s)) for c, i, s in rows[:limit]]
    chunks = sorted(total.items(), key=lambda cs: -cs[1])
    return hits, [PassageHit(owner, int(c), int(best[c]), float(s)) for c, s in chunks]
