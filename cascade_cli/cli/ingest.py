"""`cascade ingest FILE...`: stream files through the model and store their KV chunks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from cascade_cli.cli import options as opt
from cascade_cli.cli.appstate import err, out, settings, shown
from cascade_cli.cli.ingest_tree import ingest_dir
from cascade_cli.cli.interrupt import Deferred
from cascade_cli.cli.runtime import embed_path, open_context, open_model
from cascade_cli.config import Settings, parse_size
from cascade_cli.documents import Extracted, extract, manifests
from cascade_cli.documents.catalog import Document
from cascade_cli.documents.ingest import IngestStatus, ingest
from cascade_cli.documents.library import Library
from cascade_cli.errors import CascadeError, InputError, StoreError, check_name


class _LazyBar:
    """A rich progress bar that appears on the first chunk (so early errors stay one line)."""

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )

    def __init__(self, label: str, block: int, stop: Deferred) -> None:
        self.label = label
        self.block = block
        self.stop = stop
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def __enter__(self) -> _LazyBar:
        return self

    def __call__(self, s: IngestStatus) -> None:
        self.stop.check()  # called between chunks: Ctrl-C stops here, the chunk committed
        if self.bar is None:
            self.bar = Progress(*self.columns, console=err)
            self.bar.start()
            self.task = self.bar.add_task(shown(self.label), total=s.chars_total, info="")
        assert self.task is not None
        rate = (s.tokens - s.resumed_from * self.block) / max(s.elapsed, 1e-9)
        info = f"{s.tokens} tok · {s.chunks} chunks · {rate:.0f} tok/s · "
        info += f"{s.kv_bytes / 2**20:.1f} MiB KV"
        self.bar.update(self.task, total=s.chars_total, completed=s.chars_done, info=info)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


# `cascade ingest`'s own options (those other commands share: cli/options.py)
Files = Annotated[
    list[Path],
    typer.Argument(
        help="Files to ingest (PDF, EPUB, HTML, Markdown, plain text or code), or one folder."
    ),
]
Name = Annotated[
    str | None,
    typer.Option("--name", help="Name to store the document (one file) or collection under."),
]
MaxFileSize = Annotated[
    str, typer.Option("--max-file-size", help="A folder's files past this size are skipped.")
]
Verbose = Annotated[
    bool, typer.Option("--verbose", "-v", help="List the files a folder's ingest skipped.")
]
Encoding = Annotated[
    str, typer.Option("--encoding", help="Text encoding of text files (and of undeclared HTML).")
]


def ingest_cmd(
    files: Files,
    name: Name = None,
    max_file_size: MaxFileSize = "16MiB",
    verbose: Verbose = False,
    encoding: Encoding = "utf-8",
    block_size: opt.BlockSize = None,
    compression: opt.Compression = None,
    gpu_cache_size: opt.GpuCacheSize = None,
    memory_cache_size: opt.MemoryCacheSize = None,
    disk_cache_path: opt.DiskCachePath = None,
    disk_cache_budget: opt.DiskCacheBudget = None,
    model: opt.Model = None,
    gpu_layers: opt.GpuLayers = None,
    threads: opt.Threads = None,
    flash_attn: opt.FlashAttn = None,
    embed_model: opt.EmbedModel = None,
    remote: opt.Remote = None,
) -> None:
    """Ingest files into the store, ready to ask and chat about.

    Reads PDF (its text layer, page by page), EPUB (chapters in reading order),
    HTML (the main text), Markdown, plain text and source code, and keeps where
    each part came from (page, chapter, heading, lines). Stores each file's KV
    chunks and indexes and embeds its passages for recall; the document is named
    after the file unless --name is given. An interrupted ingest resumes when run
    again. With --remote, its chunks are also published. A file that cannot be
    read is reported in one line and skipped; the others are still ingested.

    A folder becomes a collection named after it (each text file under it a
    document, its path relative to the folder): .gitignore files are honoured,
    .git, dependency and build folders, binary, special and oversized files are
    skipped, and ingesting it again only reads what changed.

    Example: cascade ingest book.epub manual.pdf; cascade ingest ~/src/myrepo

    See docs/commands.md."""
    folder = _check_files(files, name)
    cfg = settings(opt.shared(locals()) | opt.flags(remote_cache_url=remote))
    if folder:
        size = parse_size(max_file_size, "--max-file-size")
        return ingest_dir(cfg, files[0], name, encoding, size, verbose)
    _ingest_files(cfg, files, name, encoding)


def _check_files(files: list[Path], name: str | None) -> bool:
    """Refuse a bad --name or path before the model loads; whether files is one folder."""
    if name is not None and not name.strip():
        raise InputError("--name is empty", "Pass a name, or leave --name out to use the file's.")
    if name and len(files) > 1:
        raise InputError(
            "--name needs exactly one file", "Ingest files one at a time to name them."
        )
    folder = len(files) == 1 and files[0].is_dir()
    for f in files:
        if f.is_dir() and not folder:
            raise InputError(f"{f} is a folder among files", "Ingest a folder on its own.")
        if not f.is_dir() and not f.is_file():
            raise InputError(f"{f} is not a readable file or folder", "Check the path.")
        if not folder:
            check_name(name or f.stem, "document", "--name notes")
    return folder


def _ingest_files(cfg: Settings, files: list[Path], name: str | None, encoding: str) -> None:
    """Ingest (and with --remote publish) each file that can be read; exit non-zero if one
    could not."""
    sources, failed = _extract_all(files, encoding)
    with (
        open_model(cfg) as m,
        open_context(cfg, m, extra_tokens=cfg.block_size) as ctx,
        Deferred() as stop,  # entered first so the store's closing flush is not cut either
        Library(cfg, ctx, embed_path=embed_path(cfg)) as lib,
    ):
        if lib.disk.repair_report.repaired:
            repaired = shown(lib.disk.repair_report.summary())
            err.print(f"[yellow]store repaired:[/yellow] {repaired}")
        for path, source in sources:
            stop.check()
            doc_name = name or path.stem
            for note in source.notes:
                err.print(f"[dim]{shown(path)}: {shown(note)}[/dim]")
            with _LazyBar(doc_name, cfg.block_size, stop) as update:
                doc = ingest(
                    ctx,
                    lib,
                    path,
                    doc_name,
                    encoding,
                    update,
                    named=name is not None,
                    notice=lambda text: err.print(f"[dim]{shown(text)}[/dim]"),
                    source=source,
                )
            out.print(
                f"ingested [bold]{shown(doc.name)}[/bold] v{doc.version}: {doc.tokens} tokens, "
                f"{doc.chunks} chunks, {doc.scheme}"
            )
            if lib.remote is not None:
                _publish(lib, doc)
    if failed is not None:  # the files that could be read are in; the exit says one was not
        raise typer.Exit(failed.exit_code)


def _publish(lib: Library, doc: Document) -> None:
    """Publish an ingested document to the remote tier; a failure is a warning."""
    assert lib.remote is not None
    lib.pager.flush()  # chunks first (published by write-back), then the manifest
    try:
        done = manifests.publish(lib, doc)
    except StoreError as exc:  # the local ingest stands
        err.print(f"[yellow]warning:[/yellow] {shown(exc.one_line())}", soft_wrap=True)
        return
    out.print(
        f"published [bold]{shown(doc.name)}[/bold] to {shown(lib.remote.tier.url)}: "
        f"{done.chunks} chunks ({done.uploaded} uploaded now)"
    )


def _extract_all(
    files: list[Path], encoding: str
) -> tuple[list[tuple[Path, Extracted]], CascadeError | None]:
    """Every file read into text before the model loads. With one file its error is raised;
    with several, each unreadable one is reported in one line and left out (the first error
    is returned), and an error is raised only when none could be read."""
    sources: list[tuple[Path, Extracted]] = []
    failed: CascadeError | None = None
    for f in files:
        try:
            sources.append((f, extract(f, encoding)))
        except CascadeError as exc:
            if len(files) == 1:
                raise
            err.print(f"[red]error:[/red] {shown(exc.one_line())}", soft_wrap=True)
            failed = failed or exc
    if not sources:
        assert failed is not None
        raise typer.Exit(failed.exit_code)
    return sources, failed
