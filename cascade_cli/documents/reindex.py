"""Recall rows for documents that lack them: passages made again from the chunks' token ids."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from cascade_cli.documents import catalog
from cascade_cli.documents.library import Library
from cascade_cli.engine import Context

Notice = Callable[[str], None]


def quiet(message: str) -> None:
    return None


def ensure_indexed(
    ctx: Context, lib: Library, docs: Sequence[catalog.Document], notice: Notice = quiet
) -> None:
    """Give documents ingested before passage recall (or whose recall rows a crash lost) their
    passages, from the chunks' stored token ids, and embed what is not embedded — saying so.
    One query finds them among a whole collection's files."""
    counts = lib.recall.indexed_counts([d.owner for d in docs])
    for doc in docs:
        if counts.get(doc.owner, 0) < doc.chunks:
            _index_again(ctx, lib, doc, notice)
    if lib.recall.semantic:
        lib.recall.flush()
        pending = lib.recall.pending([d.owner for d in docs])
        if pending > 32:
            what = f"'{docs[0].name}'" if len(docs) == 1 else f"{len(docs)} documents"
            notice(f"embedding {pending} passages of {what} for semantic recall (once)")


def _index_again(ctx: Context, lib: Library, doc: catalog.Document, notice: Notice) -> None:
    have = lib.recall.indexed(doc.owner)
    notice(
        f"indexing {doc.chunks - len(have)} chunks of '{doc.name}' for passage recall "
        "(once: it was ingested before passage recall)"
    )
    chars = 0
    for meta in sorted(lib.disk.chunks(doc.owner), key=lambda m: m.index):
        text = ctx.model.detokenize(meta.tokens.tolist())
        if meta.index not in have:
            lib.recall.index(doc.owner, meta.index, text, chars)
        chars += len(text)
