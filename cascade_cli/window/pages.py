"""A window laid out as an ordered list of stored chunks ("pages"), changed by the smallest edit.

The session's window holds chunks at increasing positions: the system prompt, then recalled
chunks, then the recent turns. Moving to a new layout never slides what stays: a chunk that
leaves is removed and leaves a gap of free positions; chunks that come in are placed in the gap
in front of the next chunk that stays (right-aligned, so a recalled turn sits just before the
recent ones). Only when a gap is too small, or the positions would run past the limit (twice
the window, at most the model's training context), do the cells that follow move — and moving
cells makes llama.cpp re-rope the whole cache on the next decode (a K-shift, the one cost here
that grows with the window), so it happens once every few windows' worth of conversation
rather than on every turn. Each chunk that stays is a window hit and costs nothing; a placed
chunk's state is not also kept in the RAM tier (the window holds it). A chunk the store cannot
serve (missing, damaged, another model's or other tokens') is recomputed from its token ids at
the window's end (seeing the whole window before it) and moved into place — except a
document's chunk whose stored state is damaged, which is recomputed where ingest made it
(documents/recompute.py, the one policy `ask` uses too): the window is emptied for that, then laid
out again from the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from cascade_cli.documents.library import Library
from cascade_cli.documents.recompute import recompute
from cascade_cli.engine import Context
from cascade_cli.engine.live import Window
from cascade_cli.errors import Cancelled, ContextFullError, CorruptChunkError, NotFoundError
from cascade_cli.window import prefix
from cascade_cli.window.page import Page, Placed
from cascade_cli.window.positions import adjacent, placement


class _Damaged(Exception):
    """A document page the store could not serve (raised and caught inside Pages.apply)."""

    def __init__(self, page: Page) -> None:
        self.page = page


class Pages:
    """The window and the pages it holds, in order, with their start positions."""

    def __init__(self, ctx: Context, lib: Library, cells: int, stash: bool = False) -> None:
        """`stash`: a stored page that leaves the window keeps its exact state in the RAM tier
        (the server, whose conversations take turns in one window); chat leaves RAM to
        prefetches (its memory stays flat over a long conversation)."""
        self.ctx = ctx
        self.lib = lib
        self.cells = cells
        self.stash = stash
        train = ctx.model.n_ctx_train or cells
        self.win = Window(ctx, max(cells, min(train, 2 * cells)))  # limit on positions
        self.fingerprint = ctx.fingerprint()
        self.layout: list[Page] = []
        self.at: dict[str, int] = {}
        self._fresh: dict[str, Any] = {}
        self._here: set[str] = set()
        self._slim: set[str] = set()  # placed without their SWA section (_far)
        self._seen: dict[str, str] = {}
        self._warm: set[str] | None = None  # stored pages in RAM when the layout began

    @property
    def saving(self) -> bool:
        """Whether chunk states are saved: not while another process writes the store (a
        shared open); the chunks are then recomputed from their token ids when next needed."""
        return self.lib.disk.mode == "write"

    @property
    def keys(self) -> list[str]:
        return [p.key for p in self.layout]

    @property
    def end(self) -> int:
        """The position after the last page."""
        return max((self.at[p.key] + p.n for p in self.layout), default=0)

    @property
    def used(self) -> int:
        """Cells the pages occupy."""
        return sum(p.n for p in self.layout)

    def reset(self) -> None:
        self.win.reset()
        self.layout = []
        self.at = {}
        self._slim = set()

    def apply(
        self,
        target: Sequence[Page],
        room: int = 0,
        stash: bool | None = None,
        stop: Callable[[], bool] | None = None,
        counted: bool = True,
    ) -> Placed:
        """Make the window hold `target` in order, with `room` free positions after it; pages
        already there stay where they are. `stash` overrides the window's own setting (no copy
        into RAM of pages that were just saved, e.g. while paging a conversation through).
        `stop` is asked before each page is restored or decoded: true raises Cancelled (the
        caller resets the window). `counted`: add hits and misses to the store's stats.

        A document's chunk the store cannot serve is recomputed in its ingest context, which
        empties the window; the layout then starts over from the store (as `ask` does)."""
        t0 = time.perf_counter()
        self._fresh = {}  # recomputed states of this layout, by key
        self._here = set()  # damaged, but no ingest window fits: made at the end
        self._seen = {}  # where each page first came from (a pass after a recompute: RAM)
        self._warm = None
        try:
            while True:
                try:
                    done = self._apply(target, room, stash, stop, counted)
                except _Damaged as bad:
                    self._recompute(bad.page)
                    continue
                done.seconds = time.perf_counter() - t0
                return done
        finally:
            self._fresh = {}
            self._here = set()

    def _recompute(self, p: Page) -> None:
        """Recompute document chunk `p` where ingest made it (saved back when this process
        writes the store), kept for the layout that follows; where the context cannot hold
        its ingest window, it is decoded at the window's end instead (and not saved)."""
        assert p.doc is not None
        self.reset()  # recompute empties the context's sequences: start over afterwards
        if self.ctx.n_ctx < p.doc.window:
            self._here.add(p.key)
            return
        meta = self.lib.chunk_meta(p.doc, int(p.key.rpartition(":")[2]))  # disk or remote
        self._fresh[p.key] = recompute(self.ctx, self.lib, p.doc, meta)  # saved where allowed

    def _apply(
        self,
        target: Sequence[Page],
        room: int,
        stash: bool | None,
        stop: Callable[[], bool] | None,
        counted: bool,
    ) -> Placed:
        t0 = time.perf_counter()
        done = Placed()
        if sum(p.n for p in target) + room > self.cells:
            raise ContextFullError(
                f"the layout needs {sum(p.n for p in target) + room} tokens, the window holds "
                f"{self.cells}",
                "Raise --gpu-cache-size or lower --max-tokens.",
            )
        if self.win.recurrent:
            return self._prefill(target, stop, t0)
        wanted = {p.key: i for i, p in enumerate(target)}
        last = -1
        keep: list[Page] = []
        for p in self.layout:  # what stays, in the target's order
            if p.key in wanted and wanted[p.key] > last and not p.transient:
                last = wanted[p.key]
                keep.append(p)
        kept = adjacent(target, self.at, {p.key for p in keep})
        keep = [p for p in keep if p.key in kept]
        for p in reversed(self.layout):
            if p.key not in kept:
                keep_ram = (self.stash if stash is None else stash) and p.key not in self._slim
                if keep_ram and p.meta and not p.transient:
                    p0 = self.at[p.key]
                    self.lib.ram.put(p.key, self.win.save(p0, p0 + p.n))
                self.win.drop(self.at[p.key], self.at[p.key] + p.n, slide=False)
                del self.at[p.key]
                self._slim.discard(p.key)
                done.dropped += 1
        self.layout = keep
        self.win.truncate(self.end)  # nothing past the pages may stay
        self.lib.disk.touch([p.key for p in keep if p.meta is not None])  # recently used
        done.kept = len(keep)
        at, shifts = placement(target, self.at)
        if max((at[p.key] + p.n for p in target), default=0) + room > self.win.limit:
            self._compact()  # out of positions: close the gaps (once every few windows)
            done.moved = True
            at, shifts = placement(target, self.at)
        for key, delta in shifts:
            p0 = self.at[key]
            self.win.move(p0, -1, delta)
            for k in self.at:
                if self.at[k] >= p0:
                    self.at[k] += delta
            self.win.end += delta
        done.moved = done.moved or bool(shifts)
        fresh = {k: v for k, v in at.items() if k not in kept}
        if self._warm is None:  # before prefetching fills RAM (a pass after a recompute too)
            self._warm = {k for k in fresh if k in self.lib.ram}
        warm = self._warm
        self._slim |= self._far(target, at, fresh)
        made = {p.key for p in target if not p.looked_up}
        self.lib.pager.prefetch([k for k in fresh if k not in made], fresh, self._slim)
        done.by_key = dict.fromkeys(kept, "window")
        for i, p in enumerate(target):
            if p.key in fresh:
                if stop is not None and stop():
                    raise Cancelled("the request was cancelled while its prompt was decoded")
                start = fresh[p.key]
                if p.choose is not None and i == len(target) - 1:
                    p = p.choose(self.win, self.at, self.win.limit - start - room)
                tier = self._materialize(p, start, "ram" if p.key in warm else "disk")
                tier = done.by_key[p.key] = self._seen.setdefault(p.key, tier)
                if tier == "recomputed":
                    done.decoded += p.n
                elif tier == "copied":
                    done.decoded += p.n - (p.copy[3] if p.copy else 0)
                if not p.transient:  # a quote is no chunk: counted nowhere
                    done.tiers[tier] += 1
                    if tier == "recomputed":
                        done.recomputed_tokens += p.n
                self.at[p.key] = start
                self.layout.insert(i, p)
        if counted:
            self.lib.disk.stats.add("window", "hits", done.kept)
            self.lib.disk.stats.add(
                "window", "misses", sum(1 for p in target if p.key in fresh and not p.transient)
            )
        done.seconds = time.perf_counter() - t0
        return done

    def _far(
        self, target: Sequence[Page], at: Mapping[str, int], fresh: Mapping[str, int]
    ) -> set[str]:
        """Keys of stored pages coming in whose every cell sits n_swa or more positions before
        the layout's end, where decoding goes on: a sliding-window model's SWA layers never see
        them, so only their full-attention section is restored (never stashed in RAM then)."""
        if self.ctx.layout != "iswa" or not target:
            return set()
        end = max(at[p.key] + p.n for p in target)
        n_swa = self.ctx.model.n_swa
        return {
            p.key for p in target
            if p.key in fresh and not p.transient and fresh[p.key] + p.n <= end - n_swa
        }  # fmt: skip

    def _prefill(
        self, target: Sequence[Page], stop: Callable[[], bool] | None, t0: float
    ) -> Placed:
        """A recurrent or hybrid model's layout: kept or restored prefix, the rest decoded
        (window.prefix)."""
        try:
            got = prefix.place(self.win, self.lib, self.fingerprint, self.layout, target, stop)
        except BaseException:
            self.reset()
            raise
        self.layout = list(target)
        self.at = {}
        pos = 0
        for p in target:
            self.at[p.key] = pos
            pos += p.n
        done = Placed(kept=got.kept, decoded=got.decoded)
        for i, p in enumerate(target):
            done.by_key[p.key] = (
                "window" if i < got.kept else got.tier if i < got.kept + got.restored else "prefill"
            )
        if got.restored:
            done.tiers[got.tier] += got.restored
        stored = sum(1 for p in target[len(target) - got.prefilled :] if not p.transient)
        if stored:
            done.tiers["prefill"] += stored
            self.lib.disk.stats.add("prefill", "hits", stored)
        self.lib.disk.stats.add("window", "hits", got.kept)
        self.lib.disk.stats.add("window", "misses", len(target) - got.kept)
        done.seconds = time.perf_counter() - t0
        return done

    def rewind(self) -> None:
        """Forget what was decoded after the pages (a reply cut short)."""
        self.win.truncate(self.end)

    def _compact(self) -> None:
        """Close every gap: each page slides down to follow the one before it."""
        expected = 0
        for p in self.layout:
            pos = self.at[p.key]
            if pos > expected:
                self.win.move(pos, pos + p.n, expected - pos)
                self.at[p.key] = expected
            expected += p.n
        self.win.end = expected

    def stored(self, p: Page) -> bool:
        """Whether the store holds this page's KV, made by this model for exactly its tokens."""
        try:
            meta = self.lib.disk.meta(p.key)
        except NotFoundError:
            return False
        return meta.fingerprint == self.fingerprint and np.array_equal(
            meta.tokens, np.asarray(p.tokens, dtype=np.int32)
        )

    def _materialize(self, p: Page, at: int, tier: str) -> str:
        """Put page `p` at the free positions from `at`: restored from RAM or disk, made with
        cells copied from a page in the window (Page.copy), else recomputed."""
        if p.copy is not None and self._copied(p, at):
            return "copied"
        if p.key in self._fresh:  # recomputed in its ingest context for this layout
            self.win.place(self._fresh[p.key], at=at, shift=False)
            return "recomputed"
        if p.looked_up and self.stored(p):
            try:
                blob = self.lib.pager.get(p.key, at=at, slim=p.key in self._slim)
                self.win.place(blob, at=at, shift=False)
                self.lib.ram.pop(p.key)  # the window holds it now; RAM keeps what is not placed
                return self.lib.pager.tier(p.key, tier == "ram")
            except (NotFoundError, CorruptChunkError):
                if p.doc is not None and p.key not in self._here:  # never serve bad bytes:
                    raise _Damaged(p) from None  # recomputed where ingest made it
        elif self.lib.remote is not None and p.looked_up:  # another machine may have it
            try:
                self.win.place(self.lib.pager.get_remote(p.key, at=at), at=at, shift=False)
                self.lib.ram.pop(p.key)
                self.lib.pager.origin(p.key)
                return "remote"
            except (NotFoundError, CorruptChunkError):
                if p.doc is not None and p.key not in self._here:
                    raise _Damaged(p) from None
        end = self.win.end
        self.win.append(p.tokens)
        blob = self.win.save(end, end + p.n)
        if p.meta is not None and self.saving:  # saved where its cells were computed
            self.lib.pager.save(p.meta.replace(pos=end), blob)
        if at < end:
            self.win.drop(end, end + p.n, slide=False)
            self.win.place(blob, at=at, shift=False)
        return "recomputed"

    def _copied(self, p: Page, at: int) -> bool:
        """Page `p` at the window's end, the cells it names copied from a page in the window
        (Window.append_copying), the tokens before them decoded, those after them deferred to
        the next append (the message's). False: not possible here (a recurrent or
        sliding-window model, the source not in the window, `at` not the end)."""
        assert p.copy is not None
        key, offset, to, n = p.copy
        if not self.win.copies or key not in self.at or at != self.win.end:
            return False
        self.win.append_copying(p.tokens, to, self.at[key] + offset, n, logits="defer")
        return True

    def page_through(
        self,
        head: Page,
        items: Sequence[Page],
        reserve: int,
        stop: Callable[[], bool] | None = None,
    ) -> Placed:
        """Store every one of `items` (oldest first) the store lacks, each decoded after `head`
        and the items before it that fit (ingest's sliding window; no window hits counted),
        saved, never kept in RAM: text longer than the window (a long chat message, an API
        conversation's unseen older blocks). A recurrent model stores no chunk states."""
        done = Placed()
        if self.win.recurrent:
            return done
        sizes = [p.n for p in items]
        for i, p in enumerate(items):
            if self.stored(p):
                continue
            n = 0
            used = head.n + p.n + reserve
            while n < i and used + sizes[i - n - 1] <= self.cells:
                used += sizes[i - n - 1]
                n += 1
            placed = self.apply([head, *items[i - n : i], p], 0, False, stop, counted=False)
            done.tiers.update(placed.tiers)
            done.recomputed_tokens += placed.recomputed_tokens
            done.decoded += placed.decoded
        if done.tiers:
            self.lib.pager.flush()  # stored before anything asks whether it is
        return done

    def append(self, page: Page, start: int) -> None:
        """Record a page whose tokens were just decoded at positions start.. (a new turn) and
        queue its state for saving (write-back). A recurrent model's window keeps a snapshot
        of the whole state when the page ends it (window.prefix)."""
        if self.win.recurrent:
            self.layout.append(page)
            self.at[page.key] = start
            if start + page.n == self.win.end:
                self.win.mark()
                key = prefix.chain(self.fingerprint, self.layout)[-1]
                prefix.save(self.win, self.lib, key, page)
            return
        blob = self.win.save(start, start + page.n)
        if page.meta is not None and self.saving:
            self.lib.pager.save(page.meta.replace(pos=start), blob)
        self.layout.append(page)
        self.at[page.key] = start
