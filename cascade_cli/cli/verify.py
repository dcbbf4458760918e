"""`cascade verify [DOC] [--repair] [--json]`: check the store; recompute or drop what is damaged."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated

import typer

from cascade_cli.cli import options as opt
from cascade_cli.cli.appstate import out, settings, shown
from cascade_cli.cli.lookup import require_document
from cascade_cli.cli.runtime import open_context, open_model
from cascade_cli.config import Settings
from cascade_cli.documents import catalog, manifests
from cascade_cli.documents import verify as fsck
from cascade_cli.documents.library import Library
from cascade_cli.errors import NotFoundError, StoreError, StoreLockedError
from cascade_cli.store import DiskStore
from cascade_cli.store.index import LOCK, writable
from cascade_cli.store.lock import StoreLock


def _with_api(store: DiskStore, report: fsck.Report, doc: str | None) -> fsck.Report:
    """Add the server's data to a whole-store check: chunks of conversations whose rows are gone
    (--repair drops them)."""
    from cascade_cli.prompts import cache

    if doc is None:
        for owner, n in cache.orphans(store).items():
            detail = f"{n} chunk(s) of a removed server conversation"
            report.damaged.append(fsck.Finding("orphan_chunks", detail, key=owner))
    return report


def _check(cfg: Settings, doc: str | None) -> fsck.Report:
    """Read-only check; data files are compared with the index only if no writer runs."""
    try:
        store = DiskStore.open(cfg.disk_cache_path, None, readonly=True)
    except NotFoundError:
        if doc is not None:
            require_document(cfg, doc)
        return fsck.Report(str(cfg.disk_cache_path), notes=["no store yet"])
    with store:
        if not writable(store.path):  # read-only media: no writer can be mid-save
            return _with_api(store, fsck.check(store, doc, files=True), doc)
        try:
            lock: StoreLock | None = StoreLock.acquire(store.path / LOCK, timeout=0)
        except StoreLockedError:
            lock = None
        try:
            return _with_api(store, fsck.check(store, doc, files=lock is not None), doc)
        finally:
            if lock is not None:
                lock.release()


def _repair(cfg: Settings, doc: str | None, report: fsck.Report) -> None:
    """Open the model and the store for writing (no open-time repair) and fix ``report``."""
    with DiskStore.open(cfg.disk_cache_path, None, readonly=True) as store:
        docs = catalog.documents(store.conn, include_partial=True)
    window = max([cfg.gpu_cache_size, *(d.window for d in docs)])
    block = max([cfg.block_size, *(d.block_size for d in docs)])
    with (
        open_model(cfg) as m,
        open_context(dataclasses.replace(cfg, gpu_cache_size=window), m, block + 256) as ctx,
        Library(cfg, ctx, repair=False) as lib,
    ):
        fresh = _with_api(lib.disk, fsck.check(lib.disk, doc, files=doc is None), doc)  # locked
        report.damaged, report.files = fresh.damaged, fresh.files
        fsck.repair(ctx, lib, report)


def _remote(cfg: Settings, doc: str | None, report: fsck.Report, repair: bool) -> None:
    """Fetch every chunk of the documents (or ``doc``) from the remote tier and decode its
    header; with ``repair``, publish again what Redis lacks (from the disk, where held)."""
    with (
        open_model(cfg) as m,
        open_context(cfg, m) as ctx,
        Library(cfg, ctx, mode="shared") as lib,
    ):
        docs = [lib.find(doc)] if doc is not None else catalog.documents(lib.conn)
        for d in docs:
            found = manifests.check(lib, d)
            report.notes.append(
                f"remote '{d.name}': {found.chunks - len(found.missing) - len(found.damaged)}"
                f" of {found.chunks} chunks held and readable"
            )
            gone = [*found.missing, *(i for i, _ in found.damaged)]
            for i, why in found.damaged:
                report.damaged.append(fsck.Finding("remote_payload", why, doc=d.name, key=d.chunk_key(i)))  # fmt: skip
            if found.missing:
                report.damaged.append(fsck.Finding("remote_missing", f"chunk(s) {fsck._span(found.missing)} not held by the remote tier", doc=d.name))  # fmt: skip
            if repair and gone:
                try:
                    done = manifests.publish(lib, d)
                    action = f"published again ({done.uploaded} uploaded)"
                except StoreError as exc:
                    action = f"not published ({exc.message})"
                for f in report.damaged:
                    if f.kind.startswith("remote_") and f.doc == d.name:
                        f.action = action


def verify(
    doc: Annotated[
        str | None, typer.Argument(help="Check only this document (name or path).")
    ] = None,
    repair: Annotated[
        bool,
        typer.Option("--repair", help="Recompute what can be recomputed, drop what cannot."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    disk_cache_path: opt.DiskCachePath = None,
    model: opt.Model = None,
    gpu_layers: opt.GpuLayers = None,
    threads: opt.Threads = None,
    flash_attn: opt.FlashAttn = None,
    remote: opt.Remote = None,
) -> None:
    """Check the store and, with --repair, fix what is damaged.

    Checks every chunk's checksum and header, the index against the data files
    and each document against its chunks; with --remote, also the chunks in
    Redis. Exits 1 if anything is damaged (also when --repair fixed it; a second
    verify then exits 0).

    Example: cascade verify --repair"""
    cfg = settings(
        opt.flags(
            disk_cache_path=disk_cache_path,
            model=model,
            gpu_layers=gpu_layers,
            threads=threads,
            flash_attn=flash_attn,
            remote_cache_url=remote,
        )
    )
    report = _check(cfg, doc)
    if repair and report.damaged:
        _repair(cfg, doc, report)
    if remote is not None and cfg.remote_cache_url:  # asked for: the remote copies too
        _remote(cfg, doc, report, repair)
    if as_json:
        out.print_json(json.dumps(report.as_dict()))
    else:
        files = "" if report.files is None else f", {report.files} files"
        out.print(
            shown(
                f"verify {report.store}: {report.chunks} chunks, {report.documents} documents{files}"
            )
        )
        for f in report.damaged:
            out.print(shown(f"damaged: {f.line()}"))
        for note in report.notes:
            out.print(shown(f"note: {note}"))
        out.print("store clean" if report.clean else f"{len(report.damaged)} problem(s) found")
    if not report.clean:
        raise typer.Exit(1)
