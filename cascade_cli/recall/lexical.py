"""Lexical recall: BM25 over the passages of one or many corpora (SQLite FTS5, one table for
the store), with phrase and proximity evidence, so a passage that holds the question's words together outranks one that repeats a
topic word many times."""

from __future__ import annotations

import heapq
import itertools
import json
import sqlite3
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass

from cascade_cli.recall import scripts, tables

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
    return " OR ".join(fts_parts(question))


def fts_parts(question: str) -> list[str]:
    """The alternatives of `fts_query`: words, word pairs, then the NEAR group (if any)."""
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
    return parts


def _uncommon(conn: sqlite3.Connection, parts: list[str]) -> list[str]:
    """`parts` without the words and pairs more than COMMON passages of the store hold (the
    NEAR group, and the two rarest parts, always stay)."""
    near = [p for p in parts if p.startswith("NEAR(")]
    counted = []
    for p in parts:
        if not p.startswith("NEAR("):
            (n,) = conn.execute(
                "SELECT COUNT(*) FROM (SELECT 1 FROM recall_fts WHERE recall_fts MATCH ? LIMIT ?)",
                (p, COMMON + 1),
            ).fetchone()
            counted.append((int(n), p))
    rare = sorted(counted)
    keep = {p for n, p in rare if n <= COMMON} | {p for _, p in rare[:2]}
    return [p for p in parts if p in keep] + near


@dataclass(frozen=True)
class PassageHit:
    """A scored passage of a corpus (higher score is better)."""

    owner: str
    chunk: int
    pidx: int
    score: float


#: Up to this many corpora a query reads each by its rowid range; more (a collection's files)
#: are read in one query that keeps the rows of those corpora.
FEW = 8
#: In a search over more than FEW corpora, a word or word pair of the question that more than
#: this many passages of the store hold is searched only through the question's rarer parts and
#: its NEAR group: scoring every passage of a word that common costs more than it tells (its
#: BM25 weight is small). On a 10,000-file code base (528k passages) "function" is in 26k.
COMMON = 4096


#: Chunks the subject ranking keeps (its weight beyond them is too small to move a hit).
SUBJECT = 256


def _matches(
    conn: sqlite3.Connection,
    owners: Sequence[str],
    question: str,
    limit: int,
    cids: Mapping[int, str] | None = None,
) -> tuple[Mapping[int, str], list[tuple[int, float]]]:
    """(corpus id → owner; FTS5 rowid and BM25 score of `owners`' passages matching
    `question`, best first — `limit` < 0: all of them). BM25 uses the whole store's
    statistics, so scores compare across owners. `cids`: the owners' corpora, if known."""
    cids = tables.corpora(conn, owners) if cids is None else cids
    if not cids or not query_terms(question):
        return cids, []
    parts = fts_parts(question)
    expr = " OR ".join(parts if len(cids) <= FEW else _uncommon(conn, parts))
    select = "SELECT rowid, -bm25(recall_fts) AS score FROM recall_fts WHERE recall_fts MATCH ?"
    rows: list[tuple[int, float]] = []
    if len(cids) <= FEW:
        for cid in cids:
            rows += conn.execute(
                f"{select} AND rowid BETWEEN ? AND ? ORDER BY score DESC LIMIT ?",
                (expr, *tables.span(cid), limit),
            ).fetchall()
        rows.sort(key=lambda r: -r[1])
        return cids, rows[: limit if limit >= 0 else None]
    rows = conn.execute(
        f"{select} AND (rowid >> {tables.CORPUS_SHIFT}) IN (SELECT value FROM json_each(?))"
        " ORDER BY score DESC LIMIT ?",
        (expr, json.dumps(list(cids)), limit),
    ).fetchall()
    return cids, rows


def _hit(cids: Mapping[int, str], rid: int, score: float) -> PassageHit:
    cid, chunk, pidx = tables.unrowid(rid)
    return PassageHit(cids[cid], chunk, pidx, float(score))


def search(
    conn: sqlite3.Connection,
    owners: Sequence[str],
    question: str,
    limit: int = 64,
    subject: bool = False,
    scope: Mapping[str, Container[int]] | None = None,
    cids: Mapping[int, str] | None = None,
) -> tuple[list[PassageHit], list[PassageHit]]:
    """(the best `limit` passages of `owners` for `question`, best first; with `subject`, also
    the SUBJECT chunks with the largest sum of all their passages' scores — how much of the
    chunk is about the question's words — each with its best passage), from one query.
    `scope`: the only chunks an owner may answer with; `cids`: the owners' corpora (corpus id
    → owner, tables.corpora), if known."""
    mine = set(owners)
    scope = {o: c for o, c in (scope or {}).items() if o in mine}
    cids, rows = _matches(conn, owners, question, -1 if subject or scope else limit, cids)
    if scope:
        ids = {c: o for c, o in cids.items() if o in scope}
        rows = [
            (rid, sc)
            for rid, sc in rows
            if (cid := rid >> tables.CORPUS_SHIFT) not in ids
            or (rid >> tables.CHUNK_SHIFT) & (tables.MAX_CHUNKS - 1) in scope[ids[cid]]
        ]
    hits = [_hit(cids, rid, sc) for rid, sc in rows[:limit]]
    if not subject:
        return hits, []
    total: dict[int, float] = {}
    best: dict[int, int] = {}
    for rid, sc in rows:  # best first: a chunk's first row is its best passage
        key = rid >> tables.CHUNK_SHIFT  # the corpus and the chunk
        total[key] = total.get(key, 0.0) + sc
        best.setdefault(key, rid)
    chunks = heapq.nlargest(SUBJECT, total.items(), key=lambda ks: ks[1])
    return hits, [_hit(cids, best[k], sc) for k, sc in chunks]
