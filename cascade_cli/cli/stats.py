"""`cascade stats`: per-tier counters and latencies, and per-document and per-session sizes."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from cascade_cli.cli import options as opt
from cascade_cli.cli.appstate import out, settings, shown
from cascade_cli.cli.docs import rows_table
from cascade_cli.documents import catalog
from cascade_cli.errors import NotFoundError
from cascade_cli.server import counters as server_stats
from cascade_cli.session import manage
from cascade_cli.store import SNAP, DiskStore, snapshot
from cascade_cli.store.stats import LATENCY_OPS, REMOTE_COUNTERS, TIERS, empty_histogram


def collect(path_flag: Any = None) -> dict[str, Any]:
    """The stats document printed by --json (keys documented in the README)."""
    cfg = settings(opt.flags(disk_cache_path=path_flag))
    try:
        store = DiskStore.open(cfg.disk_cache_path, None, readonly=True)
    except NotFoundError:
        empty = {n: 0 for n in ("hits", "misses", "bytes_read", "bytes_written", "evictions")}
        return {
            "store": str(cfg.disk_cache_path),
            "tiers": _remote({t: dict(empty) for t in TIERS}),
            "latency": {op: empty_histogram() for op in LATENCY_OPS},
            "disk": {"chunks": 0, "bytes": 0, "pinned_bytes": 0, "by_kind": by_kind({})},
            "documents": [],
            "sessions": [],
            "server": {**server_stats.section({}), **server_stats.stored({})},
        }
    with store:
        snap = snapshot(store)
        by_owner = {o["owner"]: o for o in snap.pop("owners", [])}
        docs = []
        for doc in catalog.documents(store.conn, include_partial=True):
            agg = by_owner.get(doc.owner, {})
            docs.append(
                {
                    "name": doc.name,
                    "version": doc.version,
                    "status": doc.status,
                    "tokens": doc.tokens,
                    "chunks": doc.chunks,
                    "bytes": int(agg.get("bytes", 0)),
                    "compression": doc.scheme,
                }
            )
        chats = [
            {k: r[k] for k in ("name", "turns", "tokens", "chunks", "bytes", "compression")}
            for r in manage.rows(store)
        ]
    _remote(snap["tiers"])
    snap["server"] = {**server_stats.section(snap["tiers"]), **server_stats.stored(by_owner)}
    snap["disk"]["by_kind"] = by_kind(by_owner)
    snap["store"] = str(cfg.disk_cache_path)
    snap["documents"] = docs
    snap["sessions"] = chats
    return snap


#: Owner name prefixes by what they hold (anything else, e.g. the prompt sink: "other").
KINDS = {"doc:": "documents", "session:": "sessions", "api:": "server"}


def by_kind(by_owner: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Payload bytes per kind of owner: documents, sessions, the server's, other."""
    sizes = dict.fromkeys((*KINDS.values(), "other"), 0)
    for name, o in by_owner.items():
        base = name.removeprefix(SNAP)  # a recurrent model's snapshots count with their owner
        kind = next((k for p, k in KINDS.items() if base.startswith(p)), "other")
        sizes[kind] += int(o.get("bytes", 0))
    return sizes


def _remote(tiers: dict[str, Any]) -> dict[str, Any]:
    """The remote tier's own counters, present (0) even before it was ever used."""
    for name in REMOTE_COUNTERS:
        tiers["remote"].setdefault(name, 0)
    return tiers


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _owners(data: dict[str, Any]) -> None:
    """The documents' and the sessions' tables (every column but the name stays one line)."""
    docs = rows_table("document", "v", "status", "tokens", "chunks", "size", "kv")
    for d in data["documents"]:
        docs.add_row(
            shown(d["name"]),
            str(d["version"]),
            shown(d["status"]),
            str(d["tokens"]),
            str(d["chunks"]),
            _size(d["bytes"]),
            d["compression"],
        )
    chats = rows_table("session", "turns", "tokens", "chunks", "size", "kv")
    for c in data["sessions"]:
        chats.add_row(
            shown(c["name"]), str(c["turns"]), str(c["tokens"]), str(c["chunks"]), _size(c["bytes"]),
            c["compression"],
        )  # fmt: skip
    for table in (docs, chats):
        out.print()
        out.print(table)


def stats(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON with stable keys.")] = False,
    disk_cache_path: opt.DiskCachePath = None,
) -> None:
    """Show the store's per-tier counters, latencies and sizes.

    Hits, misses, bytes and latencies per tier, what each document and session
    occupies, and the server's counters; --json prints them with stable keys.

    Example: cascade stats --json"""
    data = collect(disk_cache_path)
    if as_json:
        out.print_json(json.dumps(data))
        return
    tiers = rows_table("tier", "hits", "misses", "hit rate", "read", "written", "evicted")
    for col in tiers.columns[1:]:
        col.justify = "right"
    for name, t in data["tiers"].items():
        total = t["hits"] + t["misses"]
        rate = f"{100 * t['hits'] / total:.0f}%" if total else "-"
        tiers.add_row(
            name,
            str(t["hits"]),
            str(t["misses"]),
            rate,
            _size(t["bytes_read"]),
            _size(t["bytes_written"]),
            str(t["evictions"]),
        )
    out.print(tiers)
    out.print(shown(f"store: {data['store']}"), style="dim")
    kinds = " · ".join(f"{k} {_size(n)}" for k, n in data["disk"]["by_kind"].items())
    out.print(f"disk by owner: {kinds}")
    r = data["tiers"]["remote"]
    if any(r.values()):
        out.print(
            f"remote tier: {r['published']} chunks published, {r['corrupt']} failed "
            f"verification (not served), {r['errors']} calls failed or skipped while unreachable"
        )
    lat = rows_table("operation", "count", "mean")
    for op, h in data["latency"].items():
        mean = f"{1000 * h['seconds'] / h['count']:.2f} ms" if h.get("count") else "-"
        lat.add_row(op, str(h.get("count", 0)), mean)
    out.print()
    out.print(lat)
    _owners(data)
    out.print()
    out.print(server_stats.summary(data))
