"""`cascade docs`, `cascade sessions` and `cascade rm DOC | --session NAME`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from cascade_cli.cli import options as opt
from cascade_cli.cli.appstate import out, settings, shown
from cascade_cli.documents import catalog, collection
from cascade_cli.errors import InputError, NotFoundError
from cascade_cli.session import manage
from cascade_cli.session import transcripts as sessions
from cascade_cli.session.exclusive import lock_session
from cascade_cli.store import DiskStore, owners


def rows_table(*columns: str) -> Table:
    """A borderless table whose rows stay one line each in 80 columns: the first column (a
    name to pass to other commands) wraps if it must, a `model` column is cut short."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column(columns[0], overflow="fold")
    for col in columns[1:]:
        cut = col == "model"
        table.add_column(col, no_wrap=True, overflow="ellipsis", max_width=16 if cut else None)
    return table


def docs(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    disk_cache_path: opt.DiskCachePath = None,
) -> None:
    """List ingested documents: tokens, chunks, MiB, compression.

    A collection (an ingested folder) is one row with its files' totals.
    --json lists every document with its source path, and the collections.

    Example: cascade docs --json"""
    cfg = settings(opt.flags(disk_cache_path=disk_cache_path))
    groups: list[dict[str, object]] = []
    inside: set[str] = set()
    try:
        store = DiskStore.open(cfg.disk_cache_path, None, readonly=True)
    except NotFoundError:
        rows: list[dict[str, object]] = []
    else:
        with store:
            sizes = {o["owner"]: o["bytes"] for o in owners(store.conn)}
            rows = [
                {
                    "name": d.name,
                    "version": d.version,
                    "status": d.status,
                    "tokens": d.tokens,
                    "chunks": d.chunks,
                    "bytes": sizes.get(d.owner, 0),
                    "compression": d.scheme,
                    "path": d.path,
                }
                for d in catalog.documents(store.conn, include_partial=True)
            ]
            groups = _collections(store, rows)
    inside = {str(n) for g in groups for n in g.pop("_names")}  # type: ignore[attr-defined]
    if as_json:
        out.print_json(json.dumps({"documents": rows, "collections": groups}))
        return
    alone = [r for r in rows if r["name"] not in inside]
    table = rows_table("name", "v", "status", "tokens", "chunks", "MiB", "kv")
    for r in sorted([*alone, *groups], key=lambda r: str(r["name"])):
        table.add_row(
            *(shown(r[c]) for c in ("name", "version", "status", "tokens", "chunks")),
            f"{int(str(r['bytes'])) / 2**20:.1f}",
            shown(r["compression"]),
        )
    out.print(table)
    out.print(shown(f"store: {cfg.disk_cache_path}"), style="dim")


def _collections(store: DiskStore, rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Each collection with its files' totals (from `rows`, the documents' rows)."""
    out = []
    for c in collection.collections(store.conn):
        names = {d.name for d in collection.members(store.conn, c.name, ready=False)}
        mine = [r for r in rows if r["name"] in names]
        ready = sum(r["status"] == "ready" for r in mine)
        out.append({
            "name": f"{c.name}/", "version": "", "files": len(mine), "root": c.root,
            "status": f"{ready} files" + (f", {len(mine) - ready} partial" if ready < len(mine) else ""),
            **{k: sum(int(str(r[k])) for r in mine) for k in ("tokens", "chunks", "bytes")},
            "compression": ",".join(sorted({str(r["compression"]) for r in mine})),
            "_names": sorted(names),
        })  # fmt: skip
    return out


def sessions_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    disk_cache_path: opt.DiskCachePath = None,
) -> None:
    """List chat sessions: turns, tokens, MiB on disk, model, last use.

    --json adds chunks and compression.

    Example: cascade sessions"""
    cfg = settings(opt.flags(disk_cache_path=disk_cache_path))
    try:
        store = DiskStore.open(cfg.disk_cache_path, None, readonly=True)
    except NotFoundError:
        rows: list[dict[str, Any]] = []
    else:
        with store:
            rows = manage.rows(store)
    if as_json:
        out.print_json(json.dumps({"sessions": rows}))
        return
    table = rows_table("name", "turns", "tokens", "MiB", "model", "last used")
    for r in rows:
        table.add_row(
            shown(r["name"]),
            str(r["turns"]),
            str(r["tokens"]),
            f"{r['bytes'] / 2**20:.1f}",
            shown(r["model"]),
            time.strftime("%Y-%m-%d %H:%M", time.localtime(r["last_used"])),
        )
    out.print(table)
    out.print(shown(f"store: {cfg.disk_cache_path}"), style="dim")


def _rm_api(path: Path) -> None:
    """Remove the server's stored conversations (waits for a server's request to finish)."""
    from cascade_cli.prompts import cache

    try:
        DiskStore.open(path, None, readonly=True).close()
    except NotFoundError:
        out.print("removed the server's conversations: none stored")
        return
    with DiskStore.open(path, None) as store:
        n, freed = cache.clear(store)
    out.print(f"removed the server's conversations: {n} stored, {freed / 2**20:.1f} MiB freed")


def _rm_session(path: Path, name: str, missing: NotFoundError) -> None:
    """Remove a chat session (refused while a `cascade chat` has it open)."""
    held = lock_session(path, name, "remove")
    try:
        with DiskStore.open(path, None) as store:
            manage.sweep(store)
            with store.lock:
                found = sessions.find(store.conn, name)
            if found is None:
                raise missing
            freed = manage.remove(store, found)
    finally:
        held.release()
    out.print(shown(f"removed session {name}: {found.turns} turns, {freed / 2**20:.1f} MiB freed"))


def rm(
    doc: Annotated[
        str | None,
        typer.Argument(help="Document name (every version is removed), or a collection's."),
    ] = None,
    session: Annotated[
        str | None, typer.Option("--session", help="Remove this chat session instead.")
    ] = None,
    api: Annotated[
        bool,
        typer.Option("--api", help="Remove every conversation `cascade serve` stored instead."),
    ] = False,
    disk_cache_path: opt.DiskCachePath = None,
) -> None:
    """Remove a document, a chat session or the server's conversations.

    DOC: every version of the document (a collection: all its files); --session
    NAME: a chat session; --api:
    every conversation `cascade serve` stored. Their disk space is reclaimed.

    Example: cascade rm persuasion"""
    if (doc is not None) + (session is not None) + api != 1:
        raise InputError(
            "name one document, one --session or --api to remove",
            "Run `cascade rm DOC`, `cascade rm --session NAME` or `cascade rm --api`.",
        )
    cfg = settings(opt.flags(disk_cache_path=disk_cache_path))
    if api:
        _rm_api(cfg.disk_cache_path)
        return
    missing = (
        NotFoundError(f"no chat session named {session!r}", "See `cascade sessions`.")
        if session is not None
        else NotFoundError(f"no ingested document named {doc!r}", "See `cascade docs`.")
    )
    try:
        DiskStore.open(cfg.disk_cache_path, None, readonly=True).close()
    except NotFoundError:
        raise missing from None
    if session is not None:
        _rm_session(cfg.disk_cache_path, session, missing)
        return
    with DiskStore.open(cfg.disk_cache_path, None) as store:
        catalog.sweep(store)
        group = collection.find(store.conn, str(doc))
        files = set() if group is None else {
            d.name for d in collection.members(store.conn, group.name, ready=False)
        }  # fmt: skip
        versions = [
            d
            for d in catalog.documents(store.conn, include_partial=True)
            if d.name == doc or d.path in (doc, catalog.resolved(str(doc))) or d.name in files
        ]
        if not versions and group is None:
            raise missing
        freed = sum(catalog.remove(store, d) for d in versions)
        if group is not None:  # after its files: a crash in between leaves it listed, empty
            collection.forget(store, group.name)
    out.print(shown(f"removed {doc}: {len(versions)} version(s), {freed / 2**20:.1f} MiB freed"))
