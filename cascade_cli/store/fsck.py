"""The store-level half of `cascade verify`: every chunk row against its data file, and every
data file against the index. Nothing here changes the store (repairs are the caller's).

Payloads stay opaque: a caller that knows the codec passes ``check_payload`` to look inside.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cascade_cli.errors import CorruptChunkError
from cascade_cli.store.disk import DATA, DiskStore
from cascade_cli.store.index import COLUMNS, row_meta
from cascade_cli.store.reads import checksum
from cascade_cli.store.records import ChunkMeta

#: check_payload(meta, payload) -> what is wrong with it, or None.
PayloadCheck = Callable[[ChunkMeta, bytes], str | None]


@dataclass(frozen=True)
class Damage:
    """One thing wrong: ``kind`` is row (a malformed index row), missing, truncated, checksum,
    payload, orphan_file or temp_file (for chunks: ``key`` and ``owner``; files: ``file``)."""

    kind: str
    detail: str
    key: str = ""
    owner: str = ""
    file: str = ""


def chunk_damage(
    store: DiskStore, meta: ChunkMeta, name: str, check_payload: PayloadCheck | None
) -> Damage | None:
    """What is wrong with one chunk's bytes, or None."""
    path = store.path / DATA / name
    where = {"key": meta.key, "owner": meta.owner, "file": name}
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Damage("missing", "its data file is missing", **where)
    except OSError as exc:
        return Damage("missing", f"its data file cannot be read ({exc.strerror})", **where)
    if len(data) != meta.nbytes:
        return Damage("truncated", f"{len(data)} bytes on disk, {meta.nbytes} indexed", **where)
    if checksum(data) != meta.checksum:
        return Damage("checksum", "its checksum does not match", **where)
    why = check_payload(meta, data) if check_payload is not None else None
    return Damage("payload", why, **where) if why else None


def scan_chunks(
    store: DiskStore,
    owners: Iterable[str] | None = None,
    check_payload: PayloadCheck | None = None,
) -> tuple[int, list[Damage]]:
    """(chunks checked, damage found) over every chunk row, or those of ``owners``."""
    sql = f"SELECT {COLUMNS}, file FROM chunks"
    if owners is None:
        rows = store.conn.execute(sql + " ORDER BY owner, idx").fetchall()
    else:
        rows = []
        for owner in owners:
            rows += store.conn.execute(sql + " WHERE owner = ? ORDER BY idx", (owner,)).fetchall()
    found: list[Damage] = []
    for r in rows:
        try:
            meta, name = row_meta(r[:-1]), r[-1]
        except CorruptChunkError as exc:
            found.append(Damage("row", exc.message, key=str(r[0]), owner=str(r[1])))
            continue
        damage = chunk_damage(store, meta, name, check_payload)
        if damage is not None:  # a writer may have replaced or removed it meanwhile: look again
            now = store.conn.execute(
                f"SELECT {COLUMNS}, file FROM chunks WHERE key = ?", (meta.key,)
            ).fetchone()
            if now is not None and now[-1] != name:  # (a replaced row is well formed)
                damage = chunk_damage(store, row_meta(now[:-1]), now[-1], check_payload)
            elif now is None:
                damage = None
        if damage is not None:
            found.append(damage)
    return len(rows), found


def readable_chunks(store: DiskStore, owner: str) -> list[ChunkMeta]:
    """The well-formed chunk rows of ``owner`` by index (scan_chunks reports the others)."""
    out: list[ChunkMeta] = []
    for r in store.conn.execute(
        f"SELECT {COLUMNS} FROM chunks WHERE owner = ? ORDER BY idx", (owner,)
    ):
        try:
            out.append(row_meta(r))
        except CorruptChunkError:
            continue
    return out


def scan_files(store: DiskStore) -> tuple[int, list[Damage]]:
    """(files seen, files no row references): torn ``.tmp`` writes and orphans. Only meaningful
    while no writer is between writing a file and committing its row (hold the writer lock)."""
    data = store.path / DATA
    known = {r[0] for r in store.conn.execute("SELECT file FROM chunks").fetchall()}
    seen = 0
    damage: list[Damage] = []
    subdirs = sorted(p for p in data.iterdir() if p.is_dir()) if data.is_dir() else []
    for sub in subdirs:
        for entry in os.scandir(sub):
            if not entry.is_file(follow_symlinks=False):
                continue
            seen += 1
            name = f"{sub.name}/{entry.name}"
            if name in known:
                continue
            tmp = entry.name.endswith(".tmp")
            kind, what = ("temp_file", "a torn write") if tmp else ("orphan_file", "no row")
            damage.append(Damage(kind, f"{what} ({entry.stat().st_size} bytes)", file=name))
    return seen, damage
