"""The one place the session layer reaches recall: index a chunk's text, search, forget.

Interim: BM25 over the documents' FTS5 table (sessions under negative ids) until the passage-level
`cascade_cli.recall.Recall` lands; then `recall_for` returns that instead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from cascade_cli.paging.library import Library
from cascade_cli.recall import lexical


@dataclass(frozen=True)
class Hit:
    owner: str
    chunk: int
    score: float


class RecallLike(Protocol):
    def index(self, owner: str, chunk: int, text: str, char_start: int = 0) -> None: ...

    def search(self, owners: Sequence[str], query: str, limit: int = 32) -> list[Hit]: ...

    def forget(self, owner: str) -> None: ...

    def flush(self) -> None: ...


def _doc_id(owner: str) -> int:
    kind, _, num = owner.partition(":")
    return -int(num) if kind == "session" else int(num)


class _Interim:
    def __init__(self, lib: Library) -> None:
        self.lib = lib

    def index(self, owner: str, chunk: int, text: str, char_start: int = 0) -> None:
        with self.lib.disk.transaction() as conn:
            conn.execute(
                "INSERT INTO chunk_text (text, doc_id, idx, char_start, char_end)"
                " VALUES (?, ?, ?, ?, ?)",
                (text, _doc_id(owner), chunk, char_start, char_start + len(text)),
            )

    def search(self, owners: Sequence[str], query: str, limit: int = 32) -> list[Hit]:
        hits: list[Hit] = []
        with self.lib.disk.lock:
            for owner in owners:
                for idx, score in lexical.bm25(self.lib.conn, _doc_id(owner), query, limit):
                    hits.append(Hit(owner, idx, score))
        return sorted(hits, key=lambda h: -h.score)[:limit]

    def forget(self, owner: str) -> None:
        with self.lib.disk.transaction() as conn:
            conn.execute("DELETE FROM chunk_text WHERE doc_id = ?", (_doc_id(owner),))

    def flush(self) -> None:
        return None


def recall_for(lib: Library) -> RecallLike:
    """The recall a session uses over its own history and the documents it was given."""
    return _Interim(lib)


def forget_in(conn: sqlite3.Connection, owner: str) -> None:
    """Drop an owner's recall rows inside the caller's transaction (no model needed: `rm`)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunk_text'").fetchone():
        conn.execute("DELETE FROM chunk_text WHERE doc_id = ?", (_doc_id(owner),))
