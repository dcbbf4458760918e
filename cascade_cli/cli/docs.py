"""`cascade docs` and `cascade rm DOC`."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from cascade_cli.cli import options as opt
from cascade_cli.cli.state import out, settings
from cascade_cli.errors import NotFoundError
from cascade_cli.paging import catalog
from cascade_cli.store import DiskStore, owners


def docs(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    disk_cache_path: opt.DiskCachePath = None,
) -> None:
    """List ingested documents (tokens, chunks, bytes on disk, compression)."""
    cfg = settings(opt.flags(disk_cache_path=disk_cache_path))
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
    if as_json:
        out.print_json(json.dumps({"documents": rows}))
        return
    table = Table(title=f"documents · {cfg.disk_cache_path}")
    for col in ("name", "version", "status", "tokens", "chunks", "MiB", "compression", "path"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            *(str(r[c]) for c in ("name", "version", "status", "tokens", "chunks")),
            f"{int(str(r['bytes'])) / 2**20:.1f}",
            str(r["compression"]),
            str(r["path"]),
        )
    out.print(table)


def rm(
    doc: Annotated[str, typer.Argument(help="Document name (every version is removed).")],
    disk_cache_path: opt.DiskCachePath = None,
) -> None:
    """Remove a document and reclaim its space."""
    cfg = settings(opt.flags(disk_cache_path=disk_cache_path))
    try:
        DiskStore.open(cfg.disk_cache_path, None, readonly=True).close()
    except NotFoundError:
        raise NotFoundError(f"no ingested document named {doc!r}", "See `cascade docs`.") from None
    with DiskStore.open(cfg.disk_cache_path, None) as store:
        catalog.sweep(store)
        versions = [
            d
            for d in catalog.documents(store.conn, include_partial=True)
            if d.name == doc or d.path in (doc, catalog.resolved(doc))
        ]
        if not versions:
            raise NotFoundError(f"no ingested document named {doc!r}", "See `cascade docs`.")
        freed = sum(catalog.remove(store, d) for d in versions)
    out.print(f"removed {doc}: {len(versions)} version(s), {freed / 2**20:.1f} MiB freed")
