"""The live window: one sequence holding a prefix and chunks at consecutive positions.

Chunks enter through a scratch sequence — restoring a state clears its target sequence, so each
chunk is restored into scratch, shifted to the window's end, then shared into the window with
seq_cp; copied cells are shared, so scratch is emptied before anything else is shifted.

Chunks the pager decoded at their target position need no shift. Others (e.g. a RAM-tier state
at older positions) are moved on a copy (kv.rope: positions rewritten, keys re-roped) when the
model's RoPE can be reproduced exactly; llama.cpp's own seq_add, the fallback, re-ropes every
cell of the cache on the next decode, a fixed cost that dominated a one-chunk `ask`.

Recurrent and hybrid models (Mamba, RWKV; Jamba, Granite 4, LFM2, …) keep a running state that
sums up every token decoded so far: it has no positions, so nothing can be moved, dropped from
the middle or cut off. For them the window only grows at its end, remembers the tokens it holds
(`history`), and goes back by restoring a whole-state snapshot (`mark`, `restore`) and decoding
again what followed it; `save` serializes the whole state (a prefix snapshot), never a slice.
A decode cut short (an exception, Ctrl-C) may have changed the state without `history`
knowing: the window is then `dirty`, and the next use goes back to a mark first.

A few tokens can be `defer`red: they take their positions at once and are decoded with the next
`append`, in its batch (a quote note's closing tokens, with the message after it: a decode's
cost here is mostly per call and per token, and a second small call costs ~30 ms on a CPU).
Anything else that touches the cells decodes them first.
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
#: Whole-state snapshots a recurrent window keeps in memory to go back to (newest kept).
MARKS = 4


class Window:
    """Tracks the next free position of the window sequence and moves chunks in and out."""

    def __init__(self, ctx: Context, limit: int) -> None:
        self.ctx = ctx
        self.limit = limit
        self.end = 0
        self.rope = ctx.model.rope() if ctx.model.rope_exact else None
        self._buf = np.empty(0, dtype=np.uint8)
        self.recurrent = ctx.layout in ("recurrent", "hybrid")
        self.history: list[int] = []  # recurrent: the tokens at positions [0, end)
        self.marks: dict[int, npt.NDArray[np.uint8]] = {}  # recurrent: position -> whole state
        self.pending: list[int] = []  # deferred: positions [end - len(pending), end)
        self.reset()

    def reset(self) -> None:
        """Empty the window and scratch sequences."""
        self.ctx.seq_rm(WINDOW_SEQ)
        self.ctx.seq_rm(SCRATCH_SEQ)
        self.end = 0
        self.pending = []
        self.history = []
        self.marks = {}
        self.dirty = False  # recurrent: the state may not be the one `history` describes

    def _fixed(self, what: str) -> None:
        if self.recurrent:  # a caller's bug: recurrent layouts go through restore/truncate
            raise RuntimeError(f"a recurrent state cannot be {what}")

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
        """Decode tokens at the end of the window (after any deferred ones, in one batch)."""
        self._check(len(tokens))
        if not self.recurrent:
            if logits == "all":
                self.flush()
            ahead, self.pending = self.pending, []
            at = self.end - len(ahead)
            try:
                out = self.ctx.decode(ahead + list(tokens), at, WINDOW_SEQ, logits=logits)
            except BaseException:
                self._undo(at)
                raise
            self.end += len(tokens)
            return out
        self._resync()
        try:
            out = self.ctx.decode(list(tokens), self.end, WINDOW_SEQ, logits=logits)
        except BaseException:
            self.dirty = True  # part of it may be in the state
            raise
        self.end += len(tokens)
        self.history.extend(tokens)
        return out

    @property
    def copies(self) -> bool:
        """Whether cells can be copied within the window (append_copying): a plain KV cache
        (a recurrent state has no cells, a sliding-window cache has dropped those far back)."""
        return not self.recurrent and self.ctx.layout != "iswa"

    def defer(self, tokens: Sequence[int]) -> None:
        """Give `tokens` the next positions now and decode them with the next `append`."""
        if self.recurrent:
            self.append(tokens)
            return
        self._check(len(tokens))
        self.pending += tokens
        self.end += len(tokens)

    def flush(self) -> None:
        """Decode the deferred tokens now."""
        if self.pending:
            ahead, self.pending = self.pending, []
            try:
                self.ctx.decode(ahead, self.end - len(ahead), WINDOW_SEQ, logits="none")
            except BaseException:
                self._undo(self.end - len(ahead))
                raise

    def _undo(self, at: int) -> None:
        """A decode from position `at` failed (deferred tokens with it): none of it stays, and
        the window ends at `at` again (the deferred tokens' positions are no longer counted)."""
        self.ctx.seq_rm(WINDOW_SEQ, at, -1)
        self.end = at

    def append_copying(
        self, tokens: Sequence[int], to: int, src: int, n: int, logits: str = "none"
    ) -> npt.NDArray[np.float32]:
        """`append(tokens)`, except that tokens[to : to + n] are not decoded: they are the
        window's cells at positions [src, src + n), copied and moved here (a quote of a chunk
        already in the window). logits 'defer': the tokens after them are deferred (`defer`).
        Only where `copies`."""
        if not self.copies:
            raise RuntimeError("cells are copied in a plain KV cache only")
        if to:
            self.append(tokens[:to])
        self.place(self.save(src, src + n))
        if logits == "defer":
            self.defer(tokens[to + n :])
            return np.empty(0, dtype=np.float32)
        return self.append(tokens[to + n :], logits=logits)

    def _resync(self) -> None:
        """Recurrent, after a decode cut short: back to the newest mark, then decode again
        what `history` says follows it."""
        if not self.dirty:
            return
        tokens = self.history
        mark = max((p for p in self.marks if p <= self.end), default=0)
        if mark:
            self.ctx.state_set(WINDOW_SEQ, self.marks[mark])
        else:
            self.ctx.seq_rm(WINDOW_SEQ)
        self.end, self.history, self.dirty = mark, tokens[:mark], False
        if len(tokens) > mark:
            self.append(tokens[mark:])

    def advance(self, tokens: Sequence[int]) -> None:
        """Count tokens that were decoded into the window sequence directly (a generation)."""
        if self.recurrent:
            self.history.extend(tokens)
            self.end += len(tokens)
            if self.ctx.pos_max(WINDOW_SEQ) + 1 != self.end:
                self.dirty = True  # a token decoded but not counted (interrupted)
        else:
            self.flush()
            self.end += len(tokens)
            self.ctx.seq_rm(WINDOW_SEQ, self.end, -1)  # nothing past what is counted

    def mark(self) -> None:
        """Recurrent: keep the whole state at the window's end, to go back to (`truncate`)."""
        if not self.recurrent:
            return
        self._resync()
        if self.end in self.marks:
            return
        self.marks[self.end] = self.ctx.state_get(WINDOW_SEQ)  # a fresh array
        for old in sorted(self.marks)[:-MARKS]:
            del self.marks[old]

    def restore(self, blob: Buffer, tokens: Sequence[int]) -> None:
        """Recurrent: make the window the prefix snapshot `blob`, the state after `tokens`."""
        self.ctx.state_set(WINDOW_SEQ, blob)
        same = 0  # marks are only good for the tokens the old and the new history share
        for a, b in zip(self.history, tokens, strict=False):
            if a != b:
                break
            same += 1
        self.end, self.history, self.dirty = len(tokens), list(tokens), False
        self.marks = {k: v for k, v in self.marks.items() if k <= same and k < self.end}
        self.mark()

    def place(self, blob: Buffer, at: int | None = None, shift: bool = True) -> int:
        """Put a chunk's state (at whatever positions it holds) at the window's end, or at
        position `at`, moving the cells from `at` on up to make room (`shift=False`: the
        positions [at, at + n) are free, nothing moves); returns its token count."""
        self._fixed("placed at a position")
        self.flush()
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
        """Serialize the window's cells with positions in [p0, p1) without disturbing it
        (recurrent: the whole state, a snapshot of the prefix [0, end) — p1 must be the end)."""
        if self.recurrent:
            self._resync()
            if p1 != self.end:
                raise RuntimeError("a recurrent state is saved whole, at the window's end")
            return self.ctx.state_get(WINDOW_SEQ, out)
        self.flush()
        self.ctx.settle(SCRATCH_SEQ)  # cells moved by seq_add: their keys re-roped first
        self.ctx.seq_cp(WINDOW_SEQ, SCRATCH_SEQ, p0, p1)
        try:
            return self.ctx.state_get(SCRATCH_SEQ, out)
        finally:
            self.ctx.seq_rm(SCRATCH_SEQ)

    def drop(self, p0: int, p1: int, slide: bool = True) -> None:
        """Remove [p0, p1) from the window and slide everything after it down (`slide=False`:
        leave a gap of free positions; nothing moves)."""
        self._fixed("cut")
        self.flush()
        self.ctx.seq_rm(WINDOW_SEQ, p0, p1)
        if slide:
            self.ctx.seq_add(WINDOW_SEQ, p1, -1, p0 - p1)
            self.end -= p1 - p0
        elif p1 >= self.end:
            self.end = p0

    def truncate(self, end: int) -> None:
        """Forget every cell from position `end` on (a decode cut short, a reply undone).
        Recurrent: back to the newest snapshot at or before `end`, then decode the rest."""
        if not self.recurrent:
            end = min(end, self.end)  # never past the end (a failed decode already undone)
            if end <= self.end - len(self.pending):
                self.pending = []  # never decoded: nothing to undo
            self.flush()
            self.ctx.seq_rm(WINDOW_SEQ, end, -1)
            self.end = end
            return
        self._resync()
        if end >= self.end:
            return
        tokens = self.history[:end]
        mark = max((p for p in self.marks if p <= end), default=0)
        if mark:
            self.ctx.state_set(WINDOW_SEQ, self.marks[mark])
        else:
            self.ctx.seq_rm(WINDOW_SEQ)
        self.end, self.history = mark, tokens[:mark]
        self.marks = {k: v for k, v in self.marks.items() if k <= mark}
        if end > mark:
            self.append(tokens[mark:])

    def move(self, p0: int, p1: int, delta: int) -> None:
        """Shift the positions of the cells in [p0, p1) (p1 = -1: to the end) by `delta`; the
        positions they move to must be free. llama.cpp re-ropes the cache on the next decode."""
        self._fixed("moved")
        self.flush()
        self.ctx.seq_add(WINDOW_SEQ, p0, p1, delta)
