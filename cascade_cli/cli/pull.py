"""`cascade pull NAME --remote URL`: a document another machine published, ready to ask."""

from __future__ import annotations

from typing import Annotated

import typer

from cascade_cli.cli import options as opt
from cascade_cli.cli.appstate import out, settings, shown
from cascade_cli.cli.runtime import embed_path, open_context, open_model
from cascade_cli.documents import manifests
from cascade_cli.documents.library import Library
from cascade_cli.errors import ConfigError, check_name


def pull(
    name: Annotated[str, typer.Argument(help="Name the document was published under.")],
    remote: opt.Remote = None,
    disk_cache_path: opt.DiskCachePath = None,
    model: opt.Model = None,
    gpu_layers: opt.GpuLayers = None,
    threads: opt.Threads = None,
    embed_model: opt.EmbedModel = None,
) -> None:
    """Fetch a document another machine published to the remote tier.

    Builds its catalog entry and recall index here from its manifest; its KV
    chunks stay in Redis and `cascade ask` pages them in (no prefill).

    Example: cascade pull manual --remote redis://cache.lan:6379/0"""
    cfg = settings(
        opt.flags(
            remote_cache_url=remote,
            disk_cache_path=disk_cache_path,
            model=model,
            gpu_layers=gpu_layers,
            threads=threads,
            embed_model=embed_model,
        )
    )
    name = check_name(name, "document", "cascade pull manual")
    if not cfg.remote_cache_url:
        raise ConfigError(
            "no remote tier to pull from",
            "Pass --remote redis://host:port/0 (or set CASCADE_REMOTE_CACHE_URL).",
        )
    with (
        open_model(cfg) as m,
        open_context(cfg, m) as ctx,
        Library(cfg, ctx, embed_path=embed_path(cfg)) as lib,
    ):
        doc = manifests.pull(lib, name)
        out.print(
            f"pulled [bold]{shown(doc.name)}[/bold] v{doc.version}: {doc.tokens} tokens, "
            f"{doc.chunks} chunks, {doc.scheme} (chunks stay remote until asked)"
        )
