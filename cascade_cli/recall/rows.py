"""Stored passages read back: one passage, a passage whole across a chunk edge, and what a
quote of it reads from."""

from __future__ import annotations

import itertools
import re
import sqlite3
from collections.abc import Container, Sequence

from cascade_cli.recall.tables import DOCUMENT, Row

#: A sentence's end (closing quotes and brackets after it allowed).
_ENDS = re.compile(r"[.!?。！？][\"'”’)\]」』）]*\s*$")


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
    """What a quote of `row` reads from: its whole text and, in a document, the passages on
    either side of it. The sentence after the one that shares a question's words is often the
    one that answers it ("what errand took Frank to London?" — "…merely to have his hair cut"),
    and in a manual the one before it (an option's name, then what it does). The passage before
    comes from the same chunk only, and the passage after may open the next chunk, or run on
    into it to its sentence's end, only where that chunk is in `held` (None: any) — a quote is
    copied from the chunks the window holds. A conversation's passage stays alone (the next may
    be another speaker's)."""
    parts = _parts(conn, row)
    if row.owner.startswith(DOCUMENT):
        first, last = parts[0], parts[-1]
        if first.pidx > 0:
            before = passage(conn, row.owner, first.chunk, first.pidx - 1)
            if before is not None:
                parts.insert(0, before)
        after = passage(conn, row.owner, last.chunk, last.pidx + 1)
        if after is None and (held is None or last.chunk + 1 in held):
            after = passage(conn, row.owner, last.chunk + 1, 0)
        if after is not None:  # with the rest of its sentence where a chunk edge cuts it
            parts += [
                p
                for p in _parts(conn, after)
                if p.start >= after.start and (held is None or p.chunk in held or p is after)
            ]
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
