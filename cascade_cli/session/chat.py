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
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from cascade_cli.documents import locations
from cascade_cli.engine import Sampler
from cascade_cli.engine.generate import Generation, generate
from cascade_cli.engine.live import WINDOW_SEQ
from cascade_cli.engine.reasoning import thought_tokens
from cascade_cli.errors import InputError
from cascade_cli.session import transcripts
from cascade_cli.session.manage import remove
from cascade_cli.session.restore import drop_unfinished, index_missing, open_window
from cascade_cli.session.state import SessionState
from cascade_cli.session.transcripts import Chunk
from cascade_cli.window.layout import lay_out

__all__ = ["ChatSession", "TurnStats"]


@dataclass
class TurnStats:
    """Timings of the last turn (seconds) and what paging did for it."""

    recall_s: float = 0.0
    rerank_s: float = 0.0  # scoring the quote's passages (the rerank setting)
    layout_s: float = 0.0
    prefill_s: float = 0.0
    ttft_s: float = 0.0
    prefill_tokens: int = 0
    gen_tokens: int = 0
    tokens_per_s: float = 0.0
    recalled: list[str] = field(default_factory=list)
    #: the rerank's candidates (label, score, quoted); score None: the only one, not scored
    scored: list[tuple[str, float | None, bool]] = field(default_factory=list)
    paged_out: int = 0
    paged_in: int = 0
    #: the documents' chunks laid out for the reply and those quoted, as (owner, chunk)
    recalled_chunks: list[tuple[str, int]] = field(default_factory=list)
    quoted_chunks: list[tuple[str, int, str]] = field(default_factory=list)


class ChatSession(SessionState):
    """One open session: its state (state.py), the sampler, and the turns."""

    def opened(self) -> None:
        """The state is loaded: make the sampler and restore (or rebuild) the window."""
        self.last = TurnStats()
        self.sampler = Sampler(self.sampling, self.ctx.model)
        note = self.lib.prefill_notice()
        if note:
            self.notify(note)
        open_window(self, self.pages.fingerprint)

    # ---- turns --------------------------------------------------------------------------------

    def sources(self) -> list[dict[str, Any]]:
        """Where the last reply's document excerpts came from (documents.locations.cite)."""
        last = self.last
        with self.lib.disk.lock:
            return locations.cite(
                self.lib.conn, self.docs, last.recalled_chunks, last.quoted_chunks
            )

    def send(self, text: str) -> Generator[str, None, None]:
        """Stream the reply to `text`; the finished (or interrupted) turn is stored."""
        if not text.strip():
            raise InputError("the message is empty", "Type something.")
        stats = TurnStats()
        self.last = stats
        t0 = time.perf_counter()
        q = self.tpl.user(text)
        system = self.page(self.s.key(0))
        long = system.n + len(q) + self.reserve > self.window
        start = -1  # the message's first position, once the window is laid out
        try:
            if long:
                q = self._page_through(text)
            laid = lay_out(
                self.lib, self.tpl, window=self.window, system=system, history=self.pieces(),
                tail=len(q) + self.reserve, query=text, documents=self.docs, page_of=self.page,
                labels=self.labels(),
            )  # fmt: skip
            labels = laid.labels
            stats.recall_s = laid.plan.recall_s
            stats.recalled_chunks = list(laid.plan.recalled)
            stats.quoted_chunks = [(q.owner, q.chunk, q.text) for q in laid.plan.quotes]
            for note in laid.plan.notes:
                self.notify(note)
            before = set(self.pages.keys)
            placed = self.pages.apply(laid.pages, room=len(q) + self.reserve)
            self.count(placed)
            stats.rerank_s = laid.rerank_s
            stats.scored = [(c["label"], c["score"], c["quoted"]) for c in laid.scored]
            stats.layout_s = placed.seconds
            stats.paged_out = placed.dropped
            stats.paged_in = sum(placed.tiers.values())
            new = [label for key, label in labels.items() if key not in before]
            stats.recalled = list(labels.values())
            if new:
                self.notify("recalled " + ", ".join(labels.values()))
            start = self.pages.win.end
            t1 = time.perf_counter()
            self.pages.win.append(q, logits="last")
            stats.prefill_s = time.perf_counter() - t1
            stats.prefill_tokens = len(q)
        except BaseException:  # cut short before the reply: the turn is absent
            if long or start < 0:  # blocks of a long message, a half-laid window: both go
                self.pages.reset()  # the next message places everything again from the store
                drop_unfinished(self)
            else:
                self.pages.win.truncate(start)  # an interrupted prefill
            raise
        gen = Generation(pos=self.pages.win.end)
        pieces: list[str] = []
        free = self.window - self.pages.used - len(q)  # cells; positions may have gaps
        limit = min(self.pages.win.limit, self.pages.win.end + free) - len(self.tpl.close())
        t_first = 0.0
        try:
            for piece in generate(
                self.ctx, self.sampler, WINDOW_SEQ, gen, self.max_tokens, limit, sentences=True
            ):
                if not t_first:
                    t_first = time.perf_counter()
                    stats.ttft_s = t_first - t0
                pieces.append(piece)
                yield piece
        finally:
            reply = gen.tokens[: gen.pos - start - len(q)]
            self.pages.win.advance(reply)
            gen_s = time.perf_counter() - (t_first or time.perf_counter())
            stats.gen_tokens = len(reply)
            stats.tokens_per_s = round(max(len(reply) - 1, 0) / gen_s, 2) if gen_s > 0 else 0.0
            self._finish(text, q, reply, start, long)
            self.totals.prefill_s += stats.prefill_s
            self.totals.prefill_tokens += stats.prefill_tokens
            self.totals.gen_s += gen_s
            self.totals.gen_tokens += len(reply)
            self.totals.turns += 1

    def _page_through(self, text: str) -> list[int]:
        """A message longer than the window: all but its tail are stored as chunks of the turn
        (decoded in a sliding window, as `ingest` does, and indexed for recall, so later
        messages can recall any part of it); returns the tail to decode as usual."""
        opening, body, closing = self.tpl.user_parts(text)
        tokens = opening + body
        blocks = self.split(tokens)
        tail = blocks.pop()
        turn = self.s.turns + 1
        made = []
        for piece in blocks:
            idx = max(self.chunks) + 1
            self.chunks[idx] = Chunk(idx, turn, piece, self.model.detokenize(piece))
            made.append(self.chunks[idx])
        with self.lib.disk.transaction() as conn:
            for chunk in made:
                transcripts.put_chunk(conn, self.s, chunk)
        system = self.page(self.s.key(0))
        pages = [self.page(self.s.key(c.idx)) for c in made]
        self.count(self.pages.page_through(system, pages, self.reserve + len(closing)))
        index_missing(self)
        self.notify(f"long message: {len(tokens)} tokens paged through in {len(blocks) + 1} blocks")
        return tail + closing

    def _finish(self, text: str, q: list[int], reply: list[int], start: int, long: bool) -> None:
        """Close the reply, save the turn's chunk and commit its transcript."""
        win = self.pages.win
        close = self.tpl.close()
        win.append(close)
        tokens = q + reply + close
        turn = self.s.turns + 1
        thought = thought_tokens(self.model, reply)  # the transcript and recall keep the answer
        reply_text = self.model.detokenize(reply[thought:])
        reply_text = reply_text.strip() if thought else reply_text
        said = self.model.detokenize(q) if long else f"User: {text}"
        pieces = self.split(tokens)
        made: list[Chunk] = []
        at = 0  # where the piece starts in the turn's tokens
        for piece in pieces:
            idx = max(self.chunks) + 1
            words = f"{said}\nAssistant: {reply_text}" if len(pieces) == 1 else None
            if words is None:  # a long turn's piece: its text, less the reply's reasoning
                skip = range(len(q) - at, len(q) + thought - at)
                words = self.model.detokenize([t for i, t in enumerate(piece) if i not in skip])
            at += len(piece)
            chunk = Chunk(idx, turn, piece, words)
            self.chunks[idx] = chunk
            self.pages.append(self.page(self.s.key(idx)), start)
            start += len(piece)
            made.append(chunk)
        self.s.turns = turn
        self.s.tokens = sum(len(c.tokens) for i, c in self.chunks.items() if i)
        self.s.layout = self.pages.keys
        with self.lib.disk.transaction() as conn:
            transcripts.add_message(conn, self.s, turn, "user", text, self.tpl.user(text))
            transcripts.add_message(conn, self.s, turn, "assistant", reply_text, reply + close)
            for chunk in made:
                transcripts.put_chunk(conn, self.s, chunk)
            transcripts.update(conn, self.s)
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
            return [(m.turn, m.role, m.text) for m in transcripts.messages(self.lib.conn, self.s)]

    def reset(self) -> int:
        """Erase the conversation (keeps the system prompt and settings); returns turns erased."""
        erased = self.s.turns
        with self.lib.disk.transaction() as conn:
            transcripts.clear(conn, self.s)
            self.s.turns = 0
            self.s.tokens = 0
            self.s.layout = []
            transcripts.update(conn, self.s)
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
