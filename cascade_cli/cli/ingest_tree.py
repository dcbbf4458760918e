"""`cascade ingest DIR`: a directory as a collection (documents/collection.py), with one bar."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cascade_cli.cli.appstate import err, out, shown
from cascade_cli.cli.interrupt import Deferred
from cascade_cli.cli.runtime import embed_path, open_context, open_model
from cascade_cli.config import Settings
from cascade_cli.documents import collection
from cascade_cli.documents.ingest import IngestStatus
from cascade_cli.documents.ingest import Progress as FileProgress
from cascade_cli.documents.library import Library
from cascade_cli.documents.tree import walk
from cascade_cli.errors import InputError, check_name


class _TreeBar:
    """One bar for the whole tree: files done of all, the file being read and its tokens."""

    def __init__(self, label: str, total: int, stop: Deferred) -> None:
        self.stop = stop
        self.bar = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=err, transient=True,
        )  # fmt: skip
        self.task = self.bar.add_task(shown(label), total=total, info="")
        self.total = total
        self.steps = 0
        self.bar.start()

    def file(self, rel: str) -> FileProgress:
        def update(s: IngestStatus) -> None:
            self.stop.check()  # between chunks: Ctrl-C stops here, the chunk committed
            self.bar.update(self.task, info=f"{shown(rel)} · {s.tokens} tok")

        return update

    def step(self) -> None:
        """Before each file (and each dropped one): the one before it is done."""
        self.stop.check()
        if self.steps and self.steps < self.total:
            self.bar.advance(self.task)
        self.steps += 1

    def close(self) -> None:
        self.bar.stop()


def ingest_dir(
    cfg: Settings, root: Path, name: str | None, encoding: str, max_bytes: int, verbose: bool
) -> None:
    """Walk `root`, say what it skips, and ingest the rest as one collection."""
    coll = check_name(name or root.resolve().name, "collection", "--name code")
    if "/" in coll:
        raise InputError(
            f"invalid collection name {coll!r}: a / separates a collection from its files",
            "Pass --name without a /, e.g. --name code.",
        )
    found = walk(root, max_bytes, exclude=[cfg.disk_cache_path])  # never the store itself
    skipped = found.summary()
    if skipped:
        hint = "" if verbose else "; --verbose lists them"
        err.print(f"[dim]{shown(root)}: {shown(skipped)}{hint}[/dim]")
    if verbose:
        for reason, rels in found.skipped.items():
            for rel in rels:
                err.print(f"[dim]  {reason}: {shown(rel)}[/dim]")
    if not found.files:
        raise InputError(
            f"{root} holds no file to ingest" + (f" ({skipped})" if skipped else ""),
            "Check the folder, its .gitignore, or --max-file-size.",
        )
    if cfg.remote_cache_url:  # not linked at all: its chunks would be uploaded for nothing
        err.print("[yellow]warning:[/yellow] a collection is not published to the remote tier")
        cfg = dataclasses.replace(cfg, remote_cache_url="")
    with (
        open_model(cfg) as m,
        open_context(cfg, m, extra_tokens=cfg.block_size) as ctx,
        Deferred() as stop,
        Library(cfg, ctx, embed_path=embed_path(cfg)) as lib,
    ):
        bar = _TreeBar(coll, len(found.files), stop)
        try:
            result = collection.ingest_tree(
                ctx, lib, found, root, coll, encoding, bar.file,
                notice=lambda text: err.print(f"[dim]{shown(text)}[/dim]"), step=bar.step,
                named=name is not None,
            )  # fmt: skip
        finally:
            bar.close()
    for _, problem in result.failed:
        err.print(f"[red]error:[/red] {shown(problem)}", soft_wrap=True)
    out.print(
        f"ingested collection [bold]{shown(coll)}[/bold]: {len(found.files)} files "
        f"({result.summary()}), {result.tokens} tokens"
    )
