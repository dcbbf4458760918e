"""Checks a command makes before it loads the model, so a typo fails at once."""

from __future__ import annotations

from cascade_cli.config import Settings
from cascade_cli.documents import collection
from cascade_cli.errors import NotFoundError
from cascade_cli.store import DiskStore


def require_document(cfg: Settings, ref: str) -> None:
    """NotFoundError (exit 6) unless the store holds a ready document named or located `ref`, or
    a collection of that name with a ready file."""
    try:
        store = DiskStore.open(cfg.disk_cache_path, None, readonly=True)
    except NotFoundError:
        raise NotFoundError(
            f"no ingested document named {ref!r} (no store at {cfg.disk_cache_path})",
            f"Run `cascade ingest {ref}` first.",
        ) from None
    with store:
        collection.documents_of(store.conn, ref)
