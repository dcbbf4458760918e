"""The live window: one sequence holding a prefix and chunks at consecutive positions.

Chunks enter through a scratch sequence — restoring a state clears its target sequence, so each
chunk is restored into scratch, shifted to the window's end, then shared into the window with
seq_cp; copied cells are shared, so scratch is emptied before anything else is shifted.

Chunks the pager decoded at their target position need no shift. Others (e.g. a RAM-tier state
at older positions) are moved on a copy (kv.rope: positions rewritten, keys re-roped) when the
model's RoPE can be reproduced exactly; llama.cpp's own seq_add, the fallback, re-ropes every
cell of the cache on the next decode, a fixed cost that dominated a one-chunk `ask`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from cascade_cli.engine import Context
from cascade_cli.engine.context import Buffer
from cascade_cli.errors import ContextFullError
from cascade_cli.kv import blob as kvblob
from cascade_cli.kv.rope import shift_into

WINDOW_SEQ = 0
SCRATCH_SEQ = 1


class Window:
    """Tracks the next free position of the window sequence and moves chunks in and out."""

    def __init__(self, ctx: Context, limit: int) -> None:
        self.ctx = ctx
        self.limit = limit
        self.end = 0
        self.rope = ctx.model.rope() if ctx.model.rope_exact else None
        self._buf = np.empty(0, dtype=np.uint8)
        self.reset()

    def reset(self) -> None:
        """Empty the window and scratch sequences."""
        self.ctx.seq_rm(WINDOW_SEQ)
        self.ctx.seq_rm(SCRATCH_SEQ)
        self.end = 0

    def room(self) -> int:
        """Tokens that still fit."""
        return self.limit - self.end

    def _check(self, n: int) -> None:
        if self.end + n > self.limit:
            raise ContextFullError(
                f"the window is full ({self.end} + {n} tokens > {self.limit})",
                "Recall fewer chunks (--top-k) or raise --gpu-cache-size.",
            )

    def append(self, tokens: Sequence[int], logits: str = "none") -> npt.NDArray[np.float32]:
        """Decode tokens at the end of the window."""
        self._check(len(tokens))
        out = self.ctx.decode(list(tokens), self.end, WINDOW_SEQ, logits=logits)
        self.end += len(tokens)
        return out

    def place(self, blob: Buffer, at: int | None = None, shift: bool = True) -> int:
        """Put a chunk's state (at whatever positions it holds) at the window's end, or at
        position `at`, moving the cells from `at` on up to make room (`shift=False`: the
        positions [at, at + n) are free, nothing moves); returns its token count."""
        hdr = kvblob.header(blob)
        n = hdr.n_cells
        at = self.end if at is None else at
        if not 0 <= at <= self.end:
            raise ValueError(f"position {at} is outside the window (0..{self.end})")
        grow = n if shift else max(0, at + n - self.end)
        self._check(grow)
        if shift and at < self.end and n:
            self.ctx.seq_add(WINDOW_SEQ, at, -1, n)
        delta = at - int(hdr.positions.min()) if n else 0
        if delta and self.rope is not None:
            src = kvblob.as_u8(blob)
            if self._buf.nbytes < src.nbytes:
                self._buf = np.empty(src.nbytes, dtype=np.uint8)
            self.ctx.state_set(SCRATCH_SEQ, shift_into(src, delta, self.rope, self._buf))
        else:
            self.ctx.state_set(SCRATCH_SEQ, blob)
            if delta:
                self.ctx.seq_add(SCRATCH_SEQ, -1, -1, delta)
        self.ctx.seq_cp(SCRATCH_SEQ, WINDOW_SEQ)
        self.ctx.seq_rm(SCRATCH_SEQ)
        self.end += grow
        return n

    def save(
        self, p0: int, p1: int, out: npt.NDArray[np.uint8] | None = None
    ) -> npt.NDArray[np.uint8]:
        """Serialize the window's cells with positions in [p0, p1) without disturbing it."""
        self.ctx.seq_cp(WINDOW_SEQ, SCRATCH_SEQ, p0, p1)
        try:
            return self.ctx.state_get(SCRATCH_SEQ, out)
        finally:
            self.ctx.seq_rm(SCRATCH_SEQ)

    def drop(self, p0: int, p1: int, slide: bool = True) -> None:
        """Remove [p0, p1) from the window and slide everything after it down (`slide=False`:
        leave a gap of free positions; nothing moves)."""
        self.ctx.seq_rm(WINDOW_SEQ, p0, p1)
        if slide:
            self.ctx.seq_add(WINDOW_SEQ, p1, -1, p0 - p1)
            self.end -= p1 - p0
        elif p1 >= self.end:
            self.end = p0

    def truncate(self, end: int) -> None:
        """Forget every cell from position `end` on (a decode cut short, a reply undone)."""
        self.ctx.seq_rm(WINDOW_SEQ, end, -1)
        self.end = end

    def move(self, p0: int, p1: int, delta: int) -> None:
        """Shift the positions of the cells in [p0, p1) (p1 = -1: to the end) by `delta`; the
        positions they move to must be free. llama.cpp re-ropes the cache on the next decode."""
        self.ctx.seq_add(WINDOW_SEQ, p0, p1, delta)
