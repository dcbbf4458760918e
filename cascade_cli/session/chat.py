"""A chat session on the paging machinery: named, stored turn by turn, resumed without prefill.

The window holds the system prompt (chunk 0, never paged out), then the chunks recalled for the
current message (a part of the window kept for them), then the most recent turns. Each finished
turn — the user's message, the reply and the template's closing tokens — is saved as one chunk
(write-back) and indexed for recall; when the next message does not fit, the oldest turns leave
the window (they are already stored) and, for every message, the most relevant turns that left
are recalled into the kept part, in conversation order.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cascade_cli.engine import Context, Sampler, SamplerSettings
from cascade_cli.engine.generate import Generation, generate
from cascade_cli.errors import InputError
from cascade_cli.paging import catalog as docs
from cascade_cli.paging.library import Library
from cascade_cli.paging.window import WINDOW_SEQ
from cascade_cli.session import catalog
from cascade_cli.session.catalog import Chunk, Session
from cascade_cli.session.long import page_through
from cascade_cli.session.manage import remove
from cascade_cli.session.pages import Page, Pages, Placed
from cascade_cli.session.plan import block_for, plan
from cascade_cli.session.recall import recall_for
from cascade_cli.session.restore import check_doc, drop_unfinished, index_missing, open_window
from cascade_cli.session.template import template
from cascade_cli.store import ChunkMeta

DEFAULTS: dict[str, Any] = {
    "system": "You are a helpful assistant.",
    "temperature": 0.7,
    "top_k": 40,
    "top_p": 0.95,
    "repeat_penalty": 1.0,  # off: a penalty garbles numbers with repeated digits (4417 → 44…)
    "seed": None,
    "max_tokens": 512,
}


@dataclass
class TurnStats:
    """Timings of the last turn (seconds) and what paging did for it."""

    recall_s: float = 0.0
    layout_s: float = 0.0
    prefill_s: float = 0.0
    ttft_s: float = 0.0
    prefill_tokens: int = 0
    gen_tokens: int = 0
    tokens_per_s: float = 0.0
    recalled: list[str] = field(default_factory=list)
    paged_out: int = 0
    paged_in: int = 0


@dataclass
class Totals:
    """This process's counters for the session (what /stats prints)."""

    tiers: Counter[str] = field(default_factory=Counter)  # window / ram / disk / recomputed
    restore_s: float = 0.0
    restored_tokens: int = 0
    prefill_s: float = 0.0
    prefill_tokens: int = 0
    gen_s: float = 0.0
    gen_tokens: int = 0
    turns: int = 0


class ChatSession:
    """One open session: its row, chunks, the window's pages and the sampler."""

    def __init__(
        self,
        ctx: Context,
        lib: Library,
        name: str,
        *,
        overrides: dict[str, Any] | None = None,
        window: int | None = None,
        documents: list[docs.Document] | None = None,
        notify: Callable[[str], None] = lambda _: None,
        create: bool = True,
    ) -> None:
        self.ctx = ctx
        self.lib = lib
        self.model = ctx.model
        self.tpl = template(ctx.model)
        self.window = window or lib.settings.gpu_cache_size
        self.notify = notify
        self.docs = documents or []
        self.recall = recall_for(lib)
        self.pages = Pages(ctx, lib, self.window)
        self.totals = Totals()
        self.last = TurnStats()
        self.created = False
        name = catalog.check_name(name)
        fp = ctx.fingerprint()
        for doc in self.docs:
            check_doc(self, doc, fp)
        with lib.disk.transaction() as conn:
            row = catalog.find(conn, name)
            if row is None:
                if not create:
                    raise InputError(f"no chat session named {name!r}", "See `cascade sessions`.")
                settings = {**DEFAULTS, **(overrides or {})}
                row = catalog.create(
                    conn, name, self.model.path.name, fp, lib.settings.compression, settings
                )
                self.created = True
            elif overrides:
                row.settings = {**DEFAULTS, **row.settings, **overrides}
                catalog.update(conn, row)
            self.s: Session = row
            self.chunks = {c.idx: c for c in catalog.chunks(conn, row)}
        self.sampler = Sampler(self.sampling, ctx.model)
        open_window(self, fp)

    # ---- settings ---------------------------------------------------------------------------

    @property
    def settings(self) -> dict[str, Any]:
        return {**DEFAULTS, **self.s.settings}

    @property
    def sampling(self) -> SamplerSettings:
        st = self.settings
        return SamplerSettings(
            temperature=float(st["temperature"]),
            top_k=int(st["top_k"]),
            top_p=float(st["top_p"]),
            seed=0xFFFFFFFF if st["seed"] is None else int(st["seed"]),
            repeat_penalty=float(st["repeat_penalty"]),
            guard=self.lib.settings.repeat_guard,
        )

    @property
    def max_tokens(self) -> int:
        return int(self.settings["max_tokens"])

    @property
    def block(self) -> int:
        """Most tokens in one chunk: --block-size, or less so that any chunk can be recalled."""
        return block_for(self.lib.settings.block_size, self.window)

    def split(self, tokens: list[int]) -> list[list[int]]:
        return [tokens[o : o + self.block] for o in range(0, len(tokens), self.block)]

    @property
    def reserve(self) -> int:
        """Window kept free for the reply and its closing tokens."""
        return min(self.max_tokens, self.window // 4) + len(self.tpl.close())

    # ---- opening ------------------------------------------------------------------------------

    # ---- pages --------------------------------------------------------------------------------

    def idx_of(self, key: str) -> int:
        owner, _, idx = key.rpartition(":")
        return int(idx) if owner == self.s.owner else -1

    def page(self, key: str) -> Page:
        idx = self.idx_of(key)
        if idx >= 0:
            c = self.chunks[idx]
            meta = ChunkMeta(
                key=key, owner=self.s.owner, index=idx, start=0, end=len(c.tokens),
                tokens=np.asarray(c.tokens, dtype=np.int32), scheme=self.s.scheme, pinned=True,
            )  # fmt: skip
            return Page(key, c.tokens, meta)
        meta = self.lib.disk.meta(key)  # a document's chunk: never recomputed into the store
        return Page(key, meta.tokens.tolist(), None)

    def count(self, placed: Placed) -> None:
        self.totals.tiers["window"] += placed.kept
        self.totals.tiers.update(placed.tiers)

    # ---- turns --------------------------------------------------------------------------------

    def send(self, text: str) -> Generator[str, None, None]:
        """Stream the reply to `text`; the finished (or interrupted) turn is stored."""
        if not text.strip():
            raise InputError("the message is empty", "Type something.")
        stats = TurnStats()
        self.last = stats
        t0 = time.perf_counter()
        q = self.tpl.user(text)
        system_n = len(self.chunks[0].tokens)
        long = system_n + len(q) + self.reserve > self.window
        try:
            if long:
                q = page_through(self, text)
            pages, labels, stats.recall_s = plan(self, text, len(q))
            before = set(self.pages.keys)
            placed = self.pages.apply(pages, room=len(q) + self.reserve)
        except BaseException:
            self.pages.reset()  # the next message places everything again from the store
            drop_unfinished(self)  # blocks of a long message cut short
            raise
        self.count(placed)
        stats.layout_s = placed.seconds
        stats.paged_out = placed.dropped
        stats.paged_in = sum(placed.tiers.values())
        new = [label for key, label in labels.items() if key not in before]
        stats.recalled = list(labels.values())
        if new:
            self.notify("recalled " + ", ".join(labels.values()))
        start = self.pages.win.end
        try:
            t1 = time.perf_counter()
            self.pages.win.append(q, logits="last")
            stats.prefill_s = time.perf_counter() - t1
            stats.prefill_tokens = len(q)
        except BaseException:
            self.pages.win.truncate(start)  # an interrupted prefill: the turn is absent
            raise
        gen = Generation(pos=self.pages.win.end)
        pieces: list[str] = []
        free = self.window - self.pages.used - len(q)  # cells; positions may have gaps
        limit = min(self.pages.win.limit, self.pages.win.end + free) - len(self.tpl.close())
        t_first = 0.0
        try:
            for piece in generate(self.ctx, self.sampler, WINDOW_SEQ, gen, self.max_tokens, limit):
                if not t_first:
                    t_first = time.perf_counter()
                    stats.ttft_s = t_first - t0
                pieces.append(piece)
                yield piece
        finally:
            reply = gen.tokens[: gen.pos - start - len(q)]
            self.pages.win.truncate(gen.pos)
            gen_s = time.perf_counter() - (t_first or time.perf_counter())
            stats.gen_tokens = len(reply)
            stats.tokens_per_s = round(max(len(reply) - 1, 0) / gen_s, 2) if gen_s > 0 else 0.0
            self._finish(text, q, reply, start, long)
            self.totals.prefill_s += stats.prefill_s
            self.totals.prefill_tokens += stats.prefill_tokens
            self.totals.gen_s += gen_s
            self.totals.gen_tokens += len(reply)
            self.totals.turns += 1

    def _finish(self, text: str, q: list[int], reply: list[int], start: int, long: bool) -> None:
        """Close the reply, save the turn's chunk and commit its transcript."""
        win = self.pages.win
        close = self.tpl.close()
        win.append(close)
        tokens = q + reply + close
        turn = self.s.turns + 1
        reply_text = self.model.detokenize(reply)
        said = self.model.detokenize(q) if long else f"User: {text}"
        pieces = self.split(tokens)
        made: list[Chunk] = []
        for piece in pieces:
            idx = max(self.chunks) + 1
            words = f"{said}\nAssistant: {reply_text}" if len(pieces) == 1 else None
            chunk = Chunk(idx, turn, piece, words or self.model.detokenize(piece))
            self.chunks[idx] = chunk
            self.pages.append(self.page(self.s.key(idx)), start)
            start += len(piece)
            made.append(chunk)
        self.s.turns = turn
        self.s.tokens = sum(len(c.tokens) for i, c in self.chunks.items() if i)
        self.s.layout = self.pages.keys
        with self.lib.disk.transaction() as conn:
            catalog.add_message(conn, self.s, turn, "user", text, self.tpl.user(text))
            catalog.add_message(conn, self.s, turn, "assistant", reply_text, reply + close)
            for chunk in made:
                catalog.put_chunk(conn, self.s, chunk)
            catalog.update(conn, self.s)
        index_missing(self)

    # ---- commands -------------------------------------------------------------------------------

    def sync(self) -> None:
        """Wait until every finished turn's KV is durable and its text embedded for recall
        (before the next prompt shows), so the next message's recall waits for nothing."""
        self.lib.pager.flush()
        self.recall.flush()

    def history(self) -> list[tuple[int, str, str]]:
        """(turn, role, text) of every message."""
        with self.lib.disk.lock:
            return [(m.turn, m.role, m.text) for m in catalog.messages(self.lib.conn, self.s)]

    def reset(self) -> int:
        """Erase the conversation (keeps the system prompt and settings); returns turns erased."""
        erased = self.s.turns
        with self.lib.disk.transaction() as conn:
            catalog.clear(conn, self.s)
            self.s.turns = 0
            self.s.tokens = 0
            self.s.layout = []
            catalog.update(conn, self.s)
        self.pages.reset()
        self.chunks = {}
        self.sampler.reset()
        open_window(self, self.pages.fingerprint)
        return erased

    def idle(self) -> None:
        """While the user types: finish saving, then let other processes (a `cascade serve`,
        an ingest) write the store until `resume` takes the writer lock back."""
        self.lib.pager.flush()
        self.lib.recall.flush()
        self.lib.disk.yield_lock()

    def resume(self, timeout: float = 60.0) -> bool:
        """Take the writer lock back for the next turn, waiting up to `timeout` seconds for
        another writer's request to finish; False: this turn's chunks are not saved (another
        process writes), its messages are."""
        return self.lib.disk.take_lock(timeout)

    def close(self) -> None:
        self.sampler.close()

    def delete(self) -> None:
        """Remove this session and its chunks (an empty session is not kept)."""
        self.lib.pager.flush()
        self.lib.ram.discard_prefix(self.s.owner + ":")
        remove(self.lib.disk, self.s)
