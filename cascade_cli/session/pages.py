"""A window laid out as an ordered list of stored chunks ("pages"), changed by the smallest edit.

The session's window is a sequence of chunks at consecutive positions: the system prompt, then
recalled chunks, then the recent turns. Moving to a new layout drops the chunks that leave (the
cells after them slide down) and inserts the ones that come in at their final positions (the
cells after them move up; Window.place re-positions the stored state). Every chunk that stays
is a window hit and costs nothing; a placed chunk's decoded state is not also kept in the RAM
tier (the window holds it; the disk and the page cache serve it again when it is recalled). A chunk the store cannot serve — missing, failing its
checksum, made by another model or for other tokens — is recomputed from its token ids at the
window's end (seeing the whole window before it) and moved into place.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from cascade_cli.engine import Context
from cascade_cli.errors import ContextFullError, CorruptChunkError, NotFoundError
from cascade_cli.paging.library import Library
from cascade_cli.paging.window import Window
from cascade_cli.store import ChunkMeta


@dataclass
class Page:
    """A chunk that can sit in the window: its store key, token ids, and the record to save
    it under when it has to be recomputed (None: never saved from here, e.g. a document's)."""

    key: str
    tokens: list[int] = field(repr=False)
    meta: ChunkMeta | None = field(default=None, repr=False)

    @property
    def n(self) -> int:
        return len(self.tokens)


@dataclass
class Placed:
    """What one layout change did."""

    kept: int = 0
    dropped: int = 0
    tiers: Counter[str] = field(default_factory=Counter)  # ram / disk / recomputed
    recomputed_tokens: int = 0
    seconds: float = 0.0


class Pages:
    """The window and the pages it holds, in order."""

    def __init__(self, ctx: Context, lib: Library, limit: int) -> None:
        self.ctx = ctx
        self.lib = lib
        self.win = Window(ctx, limit)
        self.fingerprint = ctx.fingerprint()
        self.layout: list[Page] = []

    @property
    def keys(self) -> list[str]:
        return [p.key for p in self.layout]

    def reset(self) -> None:
        self.win.reset()
        self.layout = []

    def apply(self, target: Sequence[Page]) -> Placed:
        """Make the window hold `target` in order; pages already there stay where they are."""
        t0 = time.perf_counter()
        done = Placed()
        wanted = {p.key for p in target}
        order = {p.key: i for i, p in enumerate(target)}
        # drop what leaves (and anything out of the target's order), last first
        pos = [0]
        for p in self.layout:
            pos.append(pos[-1] + p.n)
        last = -1
        keep: list[bool] = []
        for p in self.layout:
            ok = p.key in wanted and order[p.key] > last
            last = order[p.key] if ok else last
            keep.append(ok)
        for i in reversed(range(len(self.layout))):
            if not keep[i]:
                self.win.drop(pos[i], pos[i + 1])
                done.dropped += 1
        self.layout = [p for p, k in zip(self.layout, keep, strict=True) if k]
        done.kept = len(self.layout)
        # insert what comes in, at its final position
        present = {p.key for p in self.layout}
        at: dict[str, int] = {}
        cursor = 0
        for p in target:
            if p.key not in present:
                at[p.key] = cursor
            cursor += p.n
        if cursor > self.win.limit:
            raise ContextFullError(
                f"the layout needs {cursor} tokens, the window holds {self.win.limit}",
                "Raise --gpu-cache-size.",
            )
        warm = {k for k in at if k in self.lib.ram}  # before prefetching fills RAM
        self.lib.pager.prefetch(list(at), at)
        cursor = 0
        for i, p in enumerate(target):
            if p.key in at:
                tier = self._materialize(p, cursor, "ram" if p.key in warm else "disk")
                done.tiers[tier] += 1
                if tier == "recomputed":
                    done.recomputed_tokens += p.n
                self.layout.insert(i, p)
            cursor += p.n
        self.lib.disk.stats.add("window", "hits", done.kept)
        self.lib.disk.stats.add("window", "misses", len(at))
        done.seconds = time.perf_counter() - t0
        return done

    def _usable(self, p: Page) -> bool:
        """Whether the store holds this page's KV, made by this model for exactly its tokens."""
        try:
            meta = self.lib.disk.meta(p.key)
        except NotFoundError:
            return False
        return meta.fingerprint == self.fingerprint and np.array_equal(
            meta.tokens, np.asarray(p.tokens, dtype=np.int32)
        )

    def _materialize(self, p: Page, at: int, tier: str) -> str:
        """Put page `p` at position `at`: restored from RAM or disk, else recomputed."""
        if self._usable(p):
            try:
                self.win.place(self.lib.pager.get(p.key, at=at), at=at)
                self.lib.ram.pop(p.key)  # the window holds it now; RAM keeps what is not placed
                return tier
            except (NotFoundError, CorruptChunkError):
                pass  # recompute below: never serve bad bytes
        end = self.win.end
        self.win.append(p.tokens)
        blob = self.win.save(end, end + p.n)
        if p.meta is not None:
            self.lib.pager.save(p.meta.replace(pos=at), blob)
        if at < end:
            self.win.drop(end, end + p.n)
            self.win.place(blob, at=at)
        return "recomputed"

    def append(self, page: Page, start: int) -> None:
        """Record a page whose tokens were just decoded at positions start.. (a new turn) and
        queue its state for saving (write-back)."""
        blob = self.win.save(start, start + page.n)
        if page.meta is not None:
            self.lib.pager.save(page.meta.replace(pos=start), blob)
        self.layout.append(page)
