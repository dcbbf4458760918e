"""Chat sessions in the store's index: the session row, its transcript and its KV chunks.

A session's KV lives in the chunk store under the owner ``session:<id>`` (chunk 0 is the system
prompt, then one chunk per turn — a user message with the reply — or several for a message
longer than the window). The transcript rows here are the source of truth: every chunk can be
recomputed from the token ids in ``session_chunks``, and the whole session re-tokenized from the
text in ``session_messages`` (another model).
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cascade_cli import errors
from cascade_cli.errors import NotFoundError
from cascade_cli.store import register_migrations
from cascade_cli.store.schema import has_table as _has


def m001_sessions(conn: sqlite3.Connection) -> None:
    """Sessions, their messages, and the token ids of their chunks."""
    conn.execute(
        """CREATE TABLE sessions (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            model TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            scheme TEXT NOT NULL,
            settings TEXT NOT NULL,
            layout TEXT NOT NULL DEFAULT '[]',
            turns INTEGER NOT NULL DEFAULT 0,
            tokens INTEGER NOT NULL DEFAULT 0,
            created REAL NOT NULL,
            updated REAL NOT NULL
        )"""
    )
    conn.execute(
        """CREATE TABLE session_messages (
            session_id INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            turn INTEGER NOT NULL,
            role TEXT NOT NULL,
            text TEXT NOT NULL,
            tokens BLOB NOT NULL,
            created REAL NOT NULL,
            PRIMARY KEY (session_id, seq)
        )"""
    )
    conn.execute(
        """CREATE TABLE session_chunks (
            session_id INTEGER NOT NULL,
            idx INTEGER NOT NULL,
            turn INTEGER NOT NULL,
            tokens BLOB NOT NULL,
            text TEXT NOT NULL,
            indexed INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (session_id, idx)
        )"""
    )


#: What every session stored before sampling defaults became settings (config.Settings).
_OLD_DEFAULTS = {
    "temperature": 0.7, "top_k": 40, "top_p": 0.95, "repeat_penalty": 1.0, "seed": None,
    "max_tokens": 512,
}  # fmt: skip


def m002_settings_follow_defaults(conn: sqlite3.Connection) -> None:
    """A session stored every sampling default with itself, so cascade.toml, CASCADE_* and a
    model's own defaults never reached it: a stored value equal to the default of the time is
    dropped (it follows the settings now); a value its flags chose, and the system prompt, stay."""
    for sid, settings in conn.execute("SELECT id, settings FROM sessions").fetchall():
        kept = {
            k: v
            for k, v in json.loads(settings).items()
            if k not in _OLD_DEFAULTS or v != _OLD_DEFAULTS[k]
        }
        conn.execute("UPDATE sessions SET settings = ? WHERE id = ?", (json.dumps(kept), sid))


register_migrations("sessions", [m001_sessions, m002_settings_follow_defaults])


def owner_of(session_id: int) -> str:
    """The chunk-store owner of a session's KV chunks."""
    return f"session:{session_id}"


def chunk_key(session_id: int, idx: int) -> str:
    return f"session:{session_id}:{idx}"


@dataclass
class Session:
    """One row of `sessions` (settings and layout decoded)."""

    id: int
    name: str
    model: str
    fingerprint: str
    scheme: str
    settings: dict[str, Any]
    layout: list[str]
    turns: int
    tokens: int
    created: float
    updated: float

    @property
    def owner(self) -> str:
        return owner_of(self.id)

    def key(self, idx: int) -> str:
        return chunk_key(self.id, idx)


@dataclass
class Chunk:
    """One row of `session_chunks`: a chunk's token ids and text."""

    idx: int
    turn: int
    tokens: list[int] = field(repr=False)
    text: str = field(repr=False)
    indexed: bool = False


@dataclass
class Message:
    seq: int
    turn: int
    role: str
    text: str
    tokens: list[int] = field(repr=False)


_COLS = "id, name, model, fingerprint, scheme, settings, layout, turns, tokens, created, updated"


def has_tables(conn: sqlite3.Connection) -> bool:
    """False for a store that never opened read-write with this layer's migrations."""
    return _has(conn, "sessions")


def _session(row: tuple[Any, ...]) -> Session:
    sid, name, model, fp, scheme, settings, layout, turns, tokens, created, updated = row
    return Session(
        sid, name, model, fp, scheme, json.loads(settings), json.loads(layout),
        turns, tokens, created, updated,
    )  # fmt: skip


def _blob(tokens: list[int]) -> bytes:
    return np.asarray(tokens, dtype="<i4").tobytes()


def _ids(blob: bytes) -> list[int]:
    return np.frombuffer(blob, dtype="<i4").tolist()


def check_name(name: str) -> str:
    """A usable session name (printable, one line, not empty, not absurdly long)."""
    return errors.check_name(name, "session", "--session work")


def find(conn: sqlite3.Connection, name: str) -> Session | None:
    if not has_tables(conn):
        return None
    row = conn.execute(f"SELECT {_COLS} FROM sessions WHERE name = ?", (name,)).fetchone()
    return _session(row) if row else None


def get(conn: sqlite3.Connection, name: str) -> Session:
    found = find(conn, name)
    if found is None:
        raise NotFoundError(f"no chat session named {name!r}", "See `cascade sessions`.")
    return found


def sessions(conn: sqlite3.Connection) -> list[Session]:
    """Every session, most recently used first."""
    if not has_tables(conn):
        return []
    rows = conn.execute(f"SELECT {_COLS} FROM sessions ORDER BY updated DESC").fetchall()
    return [_session(r) for r in rows]


def create(
    conn: sqlite3.Connection,
    name: str,
    model: str,
    fingerprint: str,
    scheme: str,
    settings: dict[str, Any],
) -> Session:
    now = time.time()
    cur = conn.execute(
        "INSERT INTO sessions (name, model, fingerprint, scheme, settings, created, updated)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (name, model, fingerprint, scheme, json.dumps(settings), now, now),
    )
    row = conn.execute(f"SELECT {_COLS} FROM sessions WHERE id = ?", (cur.lastrowid,)).fetchone()
    return _session(row)


def update(conn: sqlite3.Connection, s: Session) -> None:
    """Write the row's mutable fields back (model, fingerprint, scheme, settings, layout,
    counts); `updated` becomes now."""
    s.updated = time.time()
    conn.execute(
        "UPDATE sessions SET model = ?, fingerprint = ?, scheme = ?, settings = ?, layout = ?,"
        " turns = ?, tokens = ?, updated = ? WHERE id = ?",
        (
            s.model, s.fingerprint, s.scheme, json.dumps(s.settings), json.dumps(s.layout),
            s.turns, s.tokens, s.updated, s.id,
        ),
    )  # fmt: skip


def add_message(
    conn: sqlite3.Connection, s: Session, turn: int, role: str, text: str, tokens: list[int]
) -> None:
    row = conn.execute(
        "SELECT COALESCE(MAX(seq) + 1, 0) FROM session_messages WHERE session_id = ?", (s.id,)
    ).fetchone()
    conn.execute(
        "INSERT INTO session_messages (session_id, seq, turn, role, text, tokens, created)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (s.id, row[0], turn, role, text, _blob(tokens), time.time()),
    )


def messages(conn: sqlite3.Connection, s: Session) -> list[Message]:
    rows = conn.execute(
        "SELECT seq, turn, role, text, tokens FROM session_messages WHERE session_id = ?"
        " ORDER BY seq",
        (s.id,),
    ).fetchall()
    return [Message(q, t, r, x, _ids(b)) for q, t, r, x, b in rows]


def turns(conn: sqlite3.Connection, s: Session) -> list[tuple[int, str, str]]:
    """(turn, user text, reply text) of every finished turn, in order."""
    by_turn: dict[int, dict[str, str]] = {}
    for m in messages(conn, s):
        by_turn.setdefault(m.turn, {})[m.role] = m.text
    return [(t, r.get("user", ""), r.get("assistant", "")) for t, r in sorted(by_turn.items())]


def put_chunk(conn: sqlite3.Connection, s: Session, chunk: Chunk) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO session_chunks (session_id, idx, turn, tokens, text, indexed)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (s.id, chunk.idx, chunk.turn, _blob(chunk.tokens), chunk.text, int(chunk.indexed)),
    )


def chunks(conn: sqlite3.Connection, s: Session) -> list[Chunk]:
    rows = conn.execute(
        "SELECT idx, turn, tokens, text, indexed FROM session_chunks WHERE session_id = ?"
        " ORDER BY idx",
        (s.id,),
    ).fetchall()
    return [Chunk(i, t, _ids(b), x, bool(n)) for i, t, b, x, n in rows]


def mark_indexed(conn: sqlite3.Connection, s: Session, idxs: list[int]) -> None:
    conn.executemany(
        "UPDATE session_chunks SET indexed = 1 WHERE session_id = ? AND idx = ?",
        [(s.id, i) for i in idxs],
    )


def clear(conn: sqlite3.Connection, s: Session, keep_chunks: bool = False) -> None:
    """Drop a session's transcript (and its chunk rows unless `keep_chunks`)."""
    conn.execute("DELETE FROM session_messages WHERE session_id = ?", (s.id,))
    if not keep_chunks:
        conn.execute("DELETE FROM session_chunks WHERE session_id = ?", (s.id,))


def forget_chunks(conn: sqlite3.Connection, s: Session) -> None:
    conn.execute("DELETE FROM session_chunks WHERE session_id = ?", (s.id,))


def delete(conn: sqlite3.Connection, s: Session) -> None:
    """Remove the session's rows (its KV chunks are deleted through the store afterwards)."""
    clear(conn, s)
    conn.execute("DELETE FROM sessions WHERE id = ?", (s.id,))


def orphan_owners(conn: sqlite3.Connection, owners: list[str]) -> list[str]:
    """Session owners in the chunk store whose session row is gone (a crash inside `rm`)."""
    known = {owner_of(i) for (i,) in conn.execute("SELECT id FROM sessions")}
    snap = "snap:"  # store.SNAP: a recurrent model's prefix snapshots of the session
    return [
        o
        for o in owners
        if (o.startswith("session:") and o not in known)
        or (o.startswith(snap + "session:") and o[len(snap) :] not in known)
    ]
