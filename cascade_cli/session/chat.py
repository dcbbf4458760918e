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
from cascade_cli.session.recall import recall_for
from cascade_cli.session.template import template
from cascade_cli.store import ChunkMeta

DEFAULTS: dict[str, Any] = {
    "system": "You are a helpful assistant.",
    "temperature": 0.7,
    "top_k": 40,
    "top_p": 0.95,
    "repeat_penalty": 1.1,
    "seed": None,
    "max_tokens": 512,
}
#: Share of the window kept for recalled chunks once the conversation no longer fits.
RECALL_SHARE = 0.25
#: At most this many chunks are recalled for one message.
MAX_RECALLED = 4
#: Hits scoring below this share of the best hit are not recalled.
MIN_SCORE = 0.5


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


def _label(chunk: Chunk) -> str:
    return f"turn {chunk.turn}" if chunk.turn else "system prompt"


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
            self._check_doc(doc, fp)
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
        self.sampler = Sampler(self.sampling)
        self._open(fp)

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
        )

    @property
    def max_tokens(self) -> int:
        return int(self.settings["max_tokens"])

    @property
    def reserve(self) -> int:
        """Window kept free for the reply and its closing tokens."""
        return min(self.max_tokens, self.window // 4) + len(self.tpl.close())

    # ---- opening ------------------------------------------------------------------------------

    def _check_doc(self, doc: docs.Document, fp: str) -> None:
        keys = self.lib.disk.chunks(doc.owner)
        if keys and keys[0].fingerprint != fp:
            raise InputError(
                f"document {doc.name!r} was ingested with another model",
                f"Chat with the model it was ingested with, or `cascade ingest {doc.path}` again.",
            )

    def _open(self, fp: str) -> None:
        """Restore the stored window, or rebuild the session's chunks from its text."""
        system = self.tpl.system(str(self.settings["system"]))
        head = self.chunks.get(0)
        rebuilt = True
        if self.created or head is None:
            self._rechunk(system, None)
        elif self.s.fingerprint != fp:
            self._rechunk(system, f"it was made with {self.s.model} (another model or KV layout)")
        elif head.tokens != system:
            self._rechunk(system, "its system prompt changed")
        else:
            rebuilt = False
            self._drop_unfinished()
        self._index_missing()
        layout = [self._page(k) for k in self.s.layout if self._idx(k) in self.chunks]
        if not layout or layout[0].key != self.s.key(0):
            layout = [self._page(self.s.key(0))]
        t0 = time.perf_counter()
        while sum(p.n for p in layout) > self.window - self.reserve and len(layout) > 1:
            del layout[1]  # a smaller window than last time: the oldest leave
        placed = self.pages.apply(layout)
        self._count(placed)
        self.totals.restore_s += time.perf_counter() - t0
        self.totals.restored_tokens += sum(p.n for p in layout) - placed.recomputed_tokens
        if placed.tiers["recomputed"] and not rebuilt:
            self.notify(
                f"{placed.tiers['recomputed']} chunk(s) of session {self.s.name!r} could not be "
                f"restored and were recomputed from their text ({placed.recomputed_tokens} tokens)"
            )

    def _drop_unfinished(self) -> None:
        """Forget chunks of a turn that never finished (a long message cut short by a kill)."""
        stale = [c.idx for c in self.chunks.values() if c.turn > self.s.turns]
        if not stale:
            return
        with self.lib.disk.transaction() as conn:
            conn.executemany(
                "DELETE FROM session_chunks WHERE session_id = ? AND idx = ?",
                [(self.s.id, i) for i in stale],
            )
        for i in stale:
            self.lib.disk.delete(self.s.key(i))
            del self.chunks[i]

    def _rechunk(self, system: list[int], reason: str | None) -> None:
        """(Re)build every chunk's token ids from the transcript with this model's template."""
        with self.lib.disk.lock:
            turns = catalog.turns(self.lib.conn, self.s)
        chunks = [Chunk(0, 0, system, "")]
        for turn, user, reply in turns:
            chunks += self._turn_chunks(len(chunks), turn, user, reply, len(system))
        total = sum(len(c.tokens) for c in chunks)
        if reason:
            self.notify(
                f"session {self.s.name!r} is rebuilt from its text because {reason}: "
                f"{len(chunks) - 1} chunk(s), {total} tokens"
            )
        self.lib.ram.discard_prefix(self.s.owner + ":")
        self.recall.forget(self.s.owner)
        self.lib.disk.delete_owner(self.s.owner)
        self.s.fingerprint = self.pages.fingerprint
        self.s.model = self.model.path.name
        self.s.scheme = self.lib.settings.compression
        self.s.tokens = total - len(system)
        room = self.window - self.reserve - len(system) - int(self.window * RECALL_SHARE)
        recent: list[str] = []
        used = 0
        for c in reversed(chunks[1:]):
            used += len(c.tokens)
            if used > room:
                break
            recent.insert(0, self.s.key(c.idx))
        self.s.layout = [self.s.key(0), *recent]
        with self.lib.disk.transaction() as conn:
            catalog.forget_chunks(conn, self.s)
            for c in chunks:
                catalog.put_chunk(conn, self.s, c)
            catalog.update(conn, self.s)
        self.chunks = {c.idx: c for c in chunks}

    def _turn_chunks(
        self, first: int, turn: int, user: str, reply: str, system_n: int
    ) -> list[Chunk]:
        """A finished turn's chunk(s) from its text (one, or several for a long message)."""
        tokens = self.tpl.user(user) + self.tpl.plain(reply) + self.tpl.close()
        text = f"User: {user}\nAssistant: {reply}"
        if len(tokens) <= self.window - self.reserve - system_n:
            return [Chunk(first, turn, tokens, text)]
        step = max(64, min(self.lib.settings.block_size, (self.window - system_n) // 4))
        return [
            Chunk(
                first + i, turn, tokens[o : o + step], self.model.detokenize(tokens[o : o + step])
            )
            for i, o in enumerate(range(0, len(tokens), step))
        ]

    def _index_missing(self) -> None:
        """Index chunks whose recall rows a crash (or a rebuild) left out."""
        todo = [c for c in self.chunks.values() if c.idx and not c.indexed]
        for c in todo:
            self.recall.index(self.s.owner, c.idx, c.text)
        if todo:
            with self.lib.disk.transaction() as conn:
                catalog.mark_indexed(conn, self.s, [c.idx for c in todo])
            for c in todo:
                c.indexed = True

    # ---- pages --------------------------------------------------------------------------------

    def _idx(self, key: str) -> int:
        owner, _, idx = key.rpartition(":")
        return int(idx) if owner == self.s.owner else -1

    def _page(self, key: str) -> Page:
        idx = self._idx(key)
        if idx >= 0:
            c = self.chunks[idx]
            meta = ChunkMeta(
                key=key, owner=self.s.owner, index=idx, start=0, end=len(c.tokens),
                tokens=np.asarray(c.tokens, dtype=np.int32), scheme=self.s.scheme, pinned=True,
            )  # fmt: skip
            return Page(key, c.tokens, meta)
        meta = self.lib.disk.meta(key)  # a document's chunk: never recomputed into the store
        return Page(key, meta.tokens.tolist(), None)

    def _count(self, placed: Placed) -> None:
        self.totals.tiers["window"] += placed.kept
        self.totals.tiers.update(placed.tiers)

    def _plan(self, text: str, need: int) -> tuple[list[Page], list[str], float]:
        """The layout for the next message: (pages, labels of recalled chunks, recall seconds)."""
        system = self._page(self.s.key(0))
        turns = [c for i, c in sorted(self.chunks.items()) if i]
        free = self.window - system.n - need - self.reserve
        if sum(len(c.tokens) for c in turns) <= free and not self.docs:
            return [system] + [self._page(self.s.key(c.idx)) for c in turns], [], 0.0
        budget = int(self.window * RECALL_SHARE)
        room = free - budget
        recent: list[Chunk] = []
        used = 0
        for c in reversed(turns):
            if used + len(c.tokens) > room:
                break
            recent.insert(0, c)
            used += len(c.tokens)
        first = recent[0].idx if recent else (turns[-1].idx + 1 if turns else 1)
        t0 = time.perf_counter()
        owners = [self.s.owner] + [d.owner for d in self.docs]
        hits = self.recall.search(owners, text, limit=32) if first > 1 or self.docs else []
        chosen: list[tuple[str, int, int]] = []  # (owner, idx, tokens)
        spent = 0
        best = max((h.score for h in hits), default=0.0)
        for h in hits:
            if h.score < best * MIN_SCORE:
                break  # weak matches crowd a small model's window more than they help
            if h.owner == self.s.owner:
                if not 0 < h.chunk < first:
                    continue
                n = len(self.chunks[h.chunk].tokens)
            else:
                n = self.lib.disk.meta(f"{h.owner}:{h.chunk}").n_tokens
            if spent + n <= budget:
                chosen.append((h.owner, h.chunk, n))
                spent += n
            if len(chosen) >= MAX_RECALLED:
                break
        seconds = time.perf_counter() - t0
        rank = {d.owner: i for i, d in enumerate(self.docs)}
        doc_hits = sorted((rank[o], i) for o, i, _ in chosen if o != self.s.owner)
        mine = sorted(i for o, i, _ in chosen if o == self.s.owner)
        pages = [system]
        labels = []
        for r, i in doc_hits:
            pages.append(self._page(f"{self.docs[r].owner}:{i}"))
            labels.append(f"{self.docs[r].name} chunk {i}")
        for i in mine:
            pages.append(self._page(self.s.key(i)))
            labels.append(_label(self.chunks[i]))
        pages += [self._page(self.s.key(c.idx)) for c in recent]
        return pages, labels, seconds

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
            pages, labels, stats.recall_s = self._plan(text, len(q))
            before = set(self.pages.keys)
            placed = self.pages.apply(pages)
        except BaseException:
            self.pages.reset()  # the next message places everything again from the store
            raise
        self._count(placed)
        stats.layout_s = placed.seconds
        stats.paged_out = placed.dropped
        new = [lab for p, lab in zip(pages[1 : len(labels) + 1], labels, strict=True)
               if p.key not in before]  # fmt: skip
        stats.recalled = labels
        if new:
            self.notify("recalled " + ", ".join(labels))
        start = self.pages.win.end
        try:
            t1 = time.perf_counter()
            self.pages.win.append(q, logits="last")
            stats.prefill_s = time.perf_counter() - t1
            stats.prefill_tokens = len(q)
        except BaseException:
            self._truncate(start)  # an interrupted prefill: the turn is absent
            raise
        gen = Generation(pos=self.pages.win.end)
        pieces: list[str] = []
        limit = self.window - len(self.tpl.close())
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
            self._truncate(gen.pos)
            gen_s = time.perf_counter() - (t_first or time.perf_counter())
            stats.gen_tokens = len(reply)
            stats.tokens_per_s = round(max(len(reply) - 1, 0) / gen_s, 2) if gen_s > 0 else 0.0
            self._finish(text, q, reply, start, long)
            self.totals.prefill_s += stats.prefill_s
            self.totals.prefill_tokens += stats.prefill_tokens
            self.totals.gen_s += gen_s
            self.totals.gen_tokens += len(reply)
            self.totals.turns += 1

    def _truncate(self, end: int) -> None:
        """Forget cells from `end` on (a decode cut short)."""
        self.ctx.seq_rm(WINDOW_SEQ, end, -1)
        self.pages.win.end = end

    def _finish(self, text: str, q: list[int], reply: list[int], start: int, long: bool) -> None:
        """Close the reply, save the turn's chunk and commit its transcript."""
        win = self.pages.win
        close = self.tpl.close()
        win.append(close)
        tokens = q + reply + close
        turn = self.s.turns + 1
        idx = max(self.chunks) + 1
        reply_text = self.model.detokenize(reply)
        said = self.model.detokenize(q) if long else f"User: {text}"
        chunk = Chunk(idx, turn, tokens, f"{said}\nAssistant: {reply_text}")
        self.chunks[idx] = chunk
        self.pages.append(self._page(self.s.key(idx)), start)
        self.s.turns = turn
        self.s.tokens = sum(len(c.tokens) for i, c in self.chunks.items() if i)
        self.s.layout = self.pages.keys
        with self.lib.disk.transaction() as conn:
            catalog.add_message(conn, self.s, turn, "user", text, self.tpl.user(text))
            catalog.add_message(conn, self.s, turn, "assistant", reply_text, reply + close)
            catalog.put_chunk(conn, self.s, chunk)
            catalog.update(conn, self.s)
        self._index_missing()

    # ---- commands -------------------------------------------------------------------------------

    def sync(self) -> None:
        """Wait until every finished turn's KV is durable (before the next prompt shows)."""
        self.lib.pager.flush()

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
        self._open(self.pages.fingerprint)
        return erased

    def close(self) -> None:
        self.sampler.close()

    def delete(self) -> None:
        """Remove this session and its chunks (an empty session is not kept)."""
        self.lib.pager.flush()
        self.lib.ram.discard_prefix(self.s.owner + ":")
        remove(self.lib.disk, self.s)
