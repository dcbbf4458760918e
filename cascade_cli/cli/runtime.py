"""Opening the model and a context for a command, with a progress display for first pulls."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from cascade_cli.cli.appstate import STATE, err
from cascade_cli.config import Settings
from cascade_cli.documents.library import Library
from cascade_cli.engine import Context, Model, set_verbose
from cascade_cli.errors import ConfigError, StoreLockedError
from cascade_cli.registry import Progress as ProgressFn
from cascade_cli.registry import resolve_model

_LABELS = {
    "download": "downloading",
    "extract": "extracting",
    "verify": "verifying",
    "convert": "converting to GGUF",
}


@contextmanager
def pull_progress(label: str) -> Iterator[ProgressFn]:
    """A rich progress bar fed by registry's progress(phase, done, total); shown on first use."""
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    bar: Progress | None = None
    tasks: dict[str, TaskID] = {}

    def update(phase: str, done: int, total: int | None) -> None:
        nonlocal bar
        if bar is None:
            bar = Progress(*columns, console=err, transient=True)
            bar.start()
        if phase not in tasks:
            tasks[phase] = bar.add_task(f"{label}: {_LABELS.get(phase, phase)}", total=total)
        bar.update(tasks[phase], completed=done, total=total)

    try:
        yield update
    finally:
        if bar is not None:
            bar.stop()


def model_path(settings: Settings) -> Path:
    """Resolve settings.model to a local file, pulling a registry model on first use."""
    with pull_progress(settings.model) as update:
        return resolve_model(settings.model, update)


def embed_path(settings: Settings) -> Path | None:
    """Resolve settings.embed_model (pulled on first use), or None when recall is BM25 only."""
    if settings.embed_model.lower() == "none" or settings.recall == "bm25":
        return None
    with pull_progress(settings.embed_model) as update:
        return resolve_model(settings.embed_model, update)


@contextmanager
def open_model(settings: Settings) -> Iterator[Model]:
    """Load the configured model; freed on exit."""
    set_verbose(STATE.debug)
    with Model(model_path(settings), gpu_layers=settings.gpu_layers) as model:
        model.think = settings.think == "on"
        yield model


@contextmanager
def open_context(
    settings: Settings,
    model: Model,
    extra_tokens: int = 0,
    n_seq_max: int = 4,
    swa_full: bool = True,
) -> Iterator[Context]:
    """A context whose window is gpu_cache_size tokens, plus room for scratch sequences.
    `swa_full=False` (sliding-window models): the SWA layers keep only the cells a decode can
    still see — exact for a window laid out once in position order and never slid (ask), not
    for windows that slide old positions back into view (ingest, chat, serve)."""
    trained = model.n_ctx_train
    if 0 < trained < settings.gpu_cache_size:
        raise ConfigError(
            f"--gpu-cache-size {settings.gpu_cache_size} is above the {trained}-token context "
            f"{model.path.name} was trained on (answers past it are garbage)",
            f"Use --gpu-cache-size {trained} or less.",
        )
    n_batch = min(settings.block_size, 2048)
    with Context(
        model,
        n_ctx=settings.gpu_cache_size + extra_tokens,
        n_seq_max=n_seq_max,
        n_batch=max(n_batch, 64),
        n_threads=settings.n_threads,
        flash_attn=settings.flash_attn,
        swa_full=swa_full,
    ) as ctx:
        yield ctx


def writer_library(cfg: Settings, ctx: Context, beside_writer: str) -> Library:
    """The store opened for writing (chat sessions, the server), any model's store; beside
    another writer (an ingest, another chat), opened shared after saying `beside_writer`."""
    path = embed_path(cfg)
    try:
        return Library(cfg, ctx, timeout=1.0, embed_path=path, any_model=True)
    except StoreLockedError:
        err.print(f"[dim](the store is being written by another process: {beside_writer})[/dim]")
        return Library(cfg, ctx, mode="shared", embed_path=path, any_model=True)
