"""The sliding-window chunk writer that ingest drives (and benchmarks reuse)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from cascade_cli.documents import catalog
from cascade_cli.documents.frame import frame
from cascade_cli.documents.library import Library
from cascade_cli.documents.recompute import recompute
from cascade_cli.documents.sink import save_sink
from cascade_cli.engine import Context
from cascade_cli.engine.live import Window
from cascade_cli.errors import CorruptChunkError
from cascade_cli.store import ChunkMeta


class SlidingWriter:
    """Decodes chunks after the prefix and the previous window, saving each as it completes."""

    def __init__(self, ctx: Context, lib: Library, doc: catalog.Document) -> None:
        self.ctx = ctx
        self.lib = lib
        self.doc = doc
        self.win = Window(ctx, doc.window)
        prefix = frame(ctx.model).prefix
        self.win.append(prefix)
        save_sink(lib, self.win, prefix, doc.scheme)
        self.p0 = self.win.end
        self.win.mark()  # a recurrent model decodes each chunk after the prefix alone
        self.live: deque[int] = deque()  # token counts of the chunks in the window, oldest first
        self.tokens_done = 0
        self.chars_done = 0
        self.last_nbytes = 0  # raw bytes of the last chunk's state (before encoding)

    @property
    def capacity(self) -> int:
        """Previous chunks the window holds while a new full chunk is decoded."""
        return max(0, (self.doc.window - self.p0) // self.doc.block_size - 1)

    def rebuild(self, done: Sequence[ChunkMeta], chars_done: int) -> None:
        """Continue after `done` (committed chunks 0..n-1): restore the last ones into the window.
        A damaged one is recomputed in its own context (and saved) instead of stopping resume."""
        self.tokens_done = done[-1].end if done else 0
        self.chars_done = chars_done
        if self.win.recurrent:  # chunks are decoded after the prefix alone: nothing to restore
            return
        states = []
        at = self.p0
        for meta in list(done)[len(done) - min(len(done), self.capacity) :]:
            try:
                states.append(self.lib.pager.get(meta.key, at=at))
            except CorruptChunkError:
                states.append(recompute(self.ctx, self.lib, self.doc, meta))
            at += meta.n_tokens
        self.win.reset()  # recompute uses the window; the prefix goes back first either way
        self.win.append(frame(self.ctx.model).prefix)
        for state in states:
            self.live.append(self.win.place(state))
        self.tokens_done = done[-1].end if done else 0
        self.chars_done = chars_done

    def add(self, idx: int, toks: Sequence[int]) -> str:
        """Decode chunk `idx`, queue its KV for saving, index its text for recall."""
        win, doc = self.win, self.doc
        if win.recurrent:  # back to the prefix's snapshot: a chunk's state is [prefix, chunk]
            win.truncate(self.p0)
        while win.room() < len(toks):
            win.drop(self.p0, self.p0 + self.live.popleft())
        pos = win.end
        win.append(toks)
        self.live.append(len(toks))
        blob = win.save(0 if win.recurrent else pos, pos + len(toks))
        text = self.ctx.model.detokenize(toks)
        meta = ChunkMeta(
            key=doc.chunk_key(idx),
            owner=doc.owner,
            index=idx,
            start=self.tokens_done,
            end=self.tokens_done + len(toks),
            tokens=np.asarray(toks, dtype=np.int32),
            pos=pos,
            scheme=doc.scheme,
            pinned=True,
        )
        self.last_nbytes = int(blob.nbytes)
        self.lib.pager.save(meta, blob)
        self.lib.recall.index(doc.owner, idx, text, self.chars_done)
        with self.lib.disk.transaction() as conn:
            catalog.progress(
                conn, doc, self.tokens_done + len(toks), idx + 1, self.chars_done + len(text)
            )
        self.tokens_done += len(toks)
        self.chars_done += len(text)
        return text
