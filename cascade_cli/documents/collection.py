"""Collections: a directory ingested under one name, each of its files a document of its own.

A file `src/app.py` of the collection `repo` is the document `repo/src/app.py` (versions, resume
and the disk budget work per file, as for any document); the `collections` table remembers the
root. Ingesting the directory again is incremental: a file whose bytes hash as its ready
version's did is kept without being read further, a changed one gets a new version (the old
one goes when the new one is ready), a deleted one is dropped — each file's change is its own
catalog commit, so a run killed anywhere resumes where it stopped.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cascade_cli.documents import catalog, extract
from cascade_cli.documents.frame import frame
from cascade_cli.documents.ingest import Progress, ingest
from cascade_cli.documents.library import Library
from cascade_cli.documents.reindex import Notice, quiet
from cascade_cli.documents.tree import Walk
from cascade_cli.engine import Context
from cascade_cli.errors import CascadeError, InputError, NotFoundError
from cascade_cli.registry import sha256_file
from cascade_cli.store import DiskStore, register_migrations
from cascade_cli.store.schema import has_table


def m001_collections(conn: sqlite3.Connection) -> None:
    """One row per collection: its name and the directory it was ingested from."""
    conn.execute(
        "CREATE TABLE collections (name TEXT PRIMARY KEY, root TEXT NOT NULL,"
        " created REAL NOT NULL, updated REAL NOT NULL)"
    )


def m002_collection_files(conn: sqlite3.Connection) -> None:
    """Which documents are a collection's files (a document's name alone cannot say: `a/b`
    may be a file of the collection `a`, or a document someone named so)."""
    conn.execute("CREATE TABLE collection_files (name TEXT PRIMARY KEY, collection TEXT NOT NULL)")
    conn.execute("CREATE INDEX collection_files_of ON collection_files (collection)")


register_migrations("collections", [m001_collections, m002_collection_files])


@dataclass(frozen=True)
class Collection:
    name: str
    root: str
    created: float
    updated: float


def member(name: str, rel: str) -> str:
    """The document name of file `rel` (POSIX, relative to the root) of collection `name`."""
    return f"{name}/{rel}"


def find(conn: sqlite3.Connection, name: str) -> Collection | None:
    """The collection called `name`, or None."""
    if not has_table(conn, "collections"):
        return None
    row = conn.execute(
        "SELECT name, root, created, updated FROM collections WHERE name = ?", (name,)
    ).fetchone()
    return Collection(*row) if row else None


def collections(conn: sqlite3.Connection) -> list[Collection]:
    if not has_table(conn, "collections"):
        return []
    rows = conn.execute("SELECT name, root, created, updated FROM collections ORDER BY name")
    return [Collection(*r) for r in rows]


def members(conn: sqlite3.Connection, name: str, ready: bool = True) -> list[catalog.Document]:
    """The newest version of each document of the collection (only ready ones by default)."""
    if not has_table(conn, "collection_files"):
        return []
    newest: dict[str, catalog.Document] = {}
    mine = "SELECT name FROM collection_files WHERE collection = ?"
    for d in catalog.documents(conn, not ready, mine, (name,)):
        if d.name not in newest or d.version > newest[d.name].version:
            newest[d.name] = d
    return sorted(newest.values(), key=lambda d: d.name)


def forget(disk: DiskStore, name: str) -> None:
    """Drop the collection's row (its files are removed first, as documents)."""
    with disk.transaction() as conn:
        conn.execute("DELETE FROM collection_files WHERE collection = ?", (name,))
        conn.execute("DELETE FROM collections WHERE name = ?", (name,))


def documents_of(conn: sqlite3.Connection, ref: str) -> list[catalog.Document]:
    """The documents `ref` names: a collection's ready members, else the one document."""
    coll = find(conn, ref)
    if coll is None:
        return [catalog.find(conn, ref)]
    docs = members(conn, ref)
    if not docs:
        raise NotFoundError(
            f"the collection {ref!r} holds no ingested file yet",
            f"Run `cascade ingest {coll.root}` again.",
        )
    return docs


@dataclass
class TreeResult:
    """What one `ingest DIR` did, by file (relative paths)."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (file, the one-line error)
    tokens: int = 0

    def summary(self) -> str:
        parts = [
            f"{len(v)} {k}"
            for k, v in (("added", self.added), ("changed", self.changed), ("kept", self.kept),
                         ("dropped", self.dropped), ("failed", self.failed))
            if v
        ]  # fmt: skip
        return ", ".join(parts) or "no files"


def _sha256(path: Path) -> str | None:
    try:
        return sha256_file(path)
    except OSError:  # gone or unreadable since the walk: ingest it, and say why if it fails
        return None


def _unchanged(lib: Library, ctx: Context, prev: catalog.Document, path: Path) -> bool:
    """Whether `prev`, a ready version, is what ingesting `path` now would make."""
    cfg = lib.settings
    return (
        prev.status == "ready"
        and prev.scheme == cfg.compression
        and prev.block_size == cfg.block_size
        and prev.window == cfg.gpu_cache_size
        and prev.prefix_tokens == len(frame(ctx.model).prefix)
        and lib.disk.count(prev.owner) >= prev.chunks  # none evicted or lost to a repair
        and _sha256(path) == prev.sha256
    )


def ingest_tree(
    ctx: Context,
    lib: Library,
    walk: Walk,
    root: Path,
    name: str,
    encoding: str,
    progress: Callable[[str], Progress],
    notice: Notice = quiet,
    step: Callable[[], None] = lambda: None,
    named: bool = True,
) -> TreeResult:
    """Ingest the files `walk` found under `root` as the collection `name` (see the module's
    docstring). `progress(rel)` makes the progress callback of one file's ingest; `step` is
    called between files (Ctrl-C stops there). A name taken from the folder (`named` false)
    that holds another folder's collection is refused, not replaced."""
    now = time.time()
    where = str(root.resolve())
    with lib.disk.lock:
        held = find(lib.disk.conn, name)
    if held is not None and held.root != where and not named:
        raise InputError(
            f"the collection {name!r} holds {held.root}",
            f"Pass --name to ingest {root} under another name, or `cascade rm {name}` first.",
        )
    catalog.sweep(lib.disk)  # once per tree, not once per file
    with lib.disk.transaction() as conn:
        conn.execute(
            "INSERT INTO collections (name, root, created, updated) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (name) DO UPDATE SET root = excluded.root, updated = excluded.updated",
            (name, where, now, now),
        )
        before = {d.name: d for d in members(conn, name, ready=False)}
        owned = dict(conn.execute("SELECT name, collection FROM collection_files").fetchall())
        taken = {d.name for d in catalog.documents(conn, include_partial=True)}
    out = TreeResult()
    for path, rel in walk.files:
        step()
        doc_name = member(name, rel)
        prev = before.pop(doc_name, None)
        if prev is not None and _unchanged(lib, ctx, prev, path):
            out.kept.append(rel)
            out.tokens += prev.tokens
            continue
        if owned.get(doc_name, name) != name or (doc_name in taken and doc_name not in owned):
            out.failed.append((rel, f"the name {doc_name!r} holds another document; not replaced"))
            continue
        if doc_name not in owned:  # the file is the collection's before its ingest begins
            with lib.disk.transaction() as conn:
                conn.execute(
                    "INSERT OR IGNORE INTO collection_files (name, collection) VALUES (?, ?)",
                    (doc_name, name),
                )
        try:
            source = extract(path, encoding)
        except CascadeError as exc:  # its earlier version, if any, stays
            out.failed.append((rel, exc.one_line()))
            continue
        doc = ingest(
            ctx, lib, path, doc_name, encoding, progress(rel), named=True,
            notice=notice, source=source, sweep=False,
        )  # fmt: skip
        (out.added if prev is None or prev.status != "ready" else out.changed).append(rel)
        out.tokens += doc.tokens
    versions: dict[str, list[catalog.Document]] = {}
    with lib.disk.lock:
        for d in catalog.documents(lib.disk.conn, True) if before else []:
            versions.setdefault(d.name, []).append(d)
    for gone in before.values():  # deleted from the tree, or skipped now
        step()
        for version in versions.get(gone.name, []):
            lib.remove(version)
        with lib.disk.transaction() as conn:  # after its versions: a crash leaves it listed
            conn.execute("DELETE FROM collection_files WHERE name = ?", (gone.name,))
        out.dropped.append(gone.name[len(name) + 1 :])
    catalog.sweep(lib.disk)  # the versions the changed files' new ones replace
    return out
