"""Recomputing a damaged chunk in its own context: the window the sliding writer saved it from.

Chunk ``i`` of a document was decoded after the prompt prefix (the attention sink) and the
chunks before it that were still in the ingest window, at a fixed position. Its KV depends on
all of that, so a replacement must be decoded there too, not after whatever chunks `ask`
happened to place before it: the sink is restored, the preceding chunks are restored from the
store (as the writer had them; a preceding chunk that is damaged as well is decoded from its
token ids), and only then are the chunk's own tokens decoded, at its stored position.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from cascade_cli.documents import catalog
from cascade_cli.documents.frame import frame
from cascade_cli.documents.library import Library
from cascade_cli.documents.sink import place_sink
from cascade_cli.engine import Context
from cascade_cli.engine.live import Window
from cascade_cli.errors import ContextFullError, StoreError
from cascade_cli.store import ChunkMeta


def window_before(doc: catalog.Document, prefix: int, idx: int) -> int:
    """How many chunks preceded chunk ``idx`` in the ingest window (see SlidingWriter)."""
    capacity = max(0, (doc.window - prefix) // doc.block_size - 1)
    return min(idx, capacity)


def recompute(
    ctx: Context, lib: Library, doc: catalog.Document, meta: ChunkMeta, *, save: bool = True
) -> npt.NDArray[np.uint8]:
    """Chunk ``meta`` of ``doc`` decoded in its own context; its raw state (saved in place of
    the damaged one when ``save``; a ``shared`` store saves it only if no writer runs).
    Empties the context's window and scratch sequences."""
    if ctx.n_ctx < doc.window:
        raise ContextFullError(
            f"chunk {meta.index} of '{doc.name}' is damaged and recomputing it needs a "
            f"{doc.window}-token window (this one has {ctx.n_ctx})",
            f"Run `cascade verify {doc.name} --repair`, or rerun with --gpu-cache-size "
            f"{doc.window}.",
        )
    prefix = frame(ctx.model).prefix
    win = Window(ctx, doc.window)
    try:
        place_sink(lib, win, prefix, doc.scheme)
        # a recurrent model's chunk was decoded after the sink alone (window.prefix)
        before = 0 if win.recurrent else window_before(doc, len(prefix), meta.index)
        for j in range(meta.index - before, meta.index):
            try:
                win.place(lib.pager.get(doc.chunk_key(j), at=win.end))
            except StoreError:  # damaged or gone as well: decode it from its token ids
                win.append(lib.chunk_meta(doc, j).tokens.tolist())
        pos = win.end
        win.append(meta.tokens.tolist())
        state = win.save(0 if win.recurrent else pos, pos + meta.n_tokens).copy()
    finally:
        win.reset()
    if save:
        lib.pager.save(meta.replace(pos=pos), state)
    return state
