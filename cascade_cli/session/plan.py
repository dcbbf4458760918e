"""Choosing the window for the next message: system prompt, recalled chunks, recent turns.

While the whole conversation fits, the window holds all of it. Once it does not (or documents are
in the conversation), a share of the window is kept for recalled chunks: the newest turns fill
the rest, and the best hits of recall over the turns that left (and the documents) fill the kept
part, placed in conversation order ahead of the recent turns. Only strong hits are recalled (see
recall.py).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from cascade_cli.recall import Hit, Recall
from cascade_cli.recall.select import to_quote
from cascade_cli.session.catalog import Chunk
from cascade_cli.session.pages import Page
from cascade_cli.session.recall import strong
from cascade_cli.session.template import Template

if TYPE_CHECKING:
    from cascade_cli.session.chat import ChatSession

#: Share of the window kept for recalled chunks once the conversation no longer fits.
RECALL_SHARE = 0.25
#: Longest recall query, in characters (the end of a longer message).
QUERY_CHARS = 300
#: At most this many chunks are recalled for one message.
MAX_RECALLED = 2
#: Tokens of the best recalled passage quoted again right before the new message (0: none).
QUOTE_TOKENS = 64


def query_of(text: str) -> str:
    """What a message asks: all of a short message, the last QUERY_CHARS characters (from a
    sentence start) of a long one — a pasted text followed by a question asks the question."""
    if len(text) <= QUERY_CHARS:
        return text
    tail = text[-QUERY_CHARS:]
    marks = [
        i for i in (tail.find(". "), tail.find("? "), tail.find("! "), tail.find("\n")) if i >= 0
    ]
    cut = min(marks, default=-1)
    return tail[cut + 1 :].strip() if 0 <= cut < len(tail) - 40 else tail


def block_for(block_size: int, window: int) -> int:
    """Most tokens in one stored piece of a conversation: --block-size, or less so that any
    piece fits the share of the window kept for recall."""
    return max(16, min(block_size, int(window * RECALL_SHARE)))


def fit_recent(sizes: Sequence[int], room: int) -> int:
    """How many of the last items (token counts, oldest first) fit in `room` tokens together."""
    used = n = 0
    for size in reversed(sizes):
        if used + size > room:
            break
        used += size
        n += 1
    return n


def pick(
    hits: Sequence[Hit], size: Callable[[Hit, list[Hit]], int | None], budget: int
) -> list[Hit]:
    """The strong hits that fit `budget` tokens, best first, at most MAX_RECALLED (`size(hit,
    chosen so far)` says what a hit costs, None for a hit that may not be recalled)."""
    chosen: list[Hit] = []
    spent = 0
    for h in strong(hits):
        n = size(h, chosen)
        if n is not None and spent + n <= budget:
            chosen.append(h)
            spent += n
        if len(chosen) >= MAX_RECALLED:
            break
    return chosen


def quote_room() -> int:
    """Tokens a quote takes at most (kept out of the recent turns' share)."""
    return QUOTE_TOKENS + 16 if QUOTE_TOKENS > 0 else 0


def worth_quoting(recall: Recall, mode: str, picked: Sequence[Hit]) -> bool:
    """Whether the best hit is quoted: only when every recall method ranked it first (both,
    in hybrid mode) — the note costs a decode of up to QUOTE_TOKENS tokens at the window's
    end, worth it for a message that plainly asks about something said before, not for every
    turn that merely recalls related ones."""
    return QUOTE_TOKENS > 0 and bool(to_quote(picked, "agree", recall.methods(mode)))


def quote(tpl: Template, source: str, text: str) -> Page | None:
    """A short system note quoting the best recalled passage, placed after the recent turns
    (before the new message): the recalled chunk keeps its place in conversation order, and a
    small model that would not copy a fact across thousands of tokens reads it again next to
    the question. Transient: decoded wherever it is placed, never stored or kept."""
    if QUOTE_TOKENS <= 0 or not text.strip():
        return None
    head = tpl.special(tpl.sys_open) + tpl.plain(f"{source[:40]}: ")
    tail = tpl.special(tpl.sys_close)
    body = tpl.plain(" ".join(text.split()))[: max(0, quote_room() - len(head) - len(tail))]
    tokens = head + body + tail
    digest = hashlib.sha1(np.asarray(tokens, dtype="<i4").tobytes()).hexdigest()[:16]
    return Page(f"quote:{digest}", tokens, transient=True)


def _label(chunk: Chunk) -> str:
    return f"turn {chunk.turn}" if chunk.turn else "system prompt"


def _frame(chat: ChatSession, key: str, tokens: list[int]) -> Page:
    """Template tokens around a document's excerpts (decoded when placed, never stored)."""
    return Page(key, tokens)


def plan(chat: ChatSession, text: str, need: int) -> tuple[list[Page], dict[str, str], float]:
    """The layout for the next message: (pages, labels of recalled chunks by key, seconds
    recall took)."""
    system = chat.page(chat.s.key(0))
    turns = [c for i, c in sorted(chat.chunks.items()) if i]
    free = chat.window - system.n - need - chat.reserve
    if sum(len(c.tokens) for c in turns) <= free and not chat.docs:
        return [system] + [chat.page(chat.s.key(c.idx)) for c in turns], {}, 0.0
    budget = int(chat.window * RECALL_SHARE)
    frames = {
        d.owner: (
            chat.tpl.special(chat.tpl.user_open)
            + chat.tpl.plain(f"Excerpts from the document {d.name}:\n\n"),
            chat.tpl.special(chat.tpl.user_close),
        )
        for d in chat.docs
    }
    room = quote_room()  # the quote comes out of the recent turns' share
    n_recent = fit_recent([len(c.tokens) for c in turns], free - budget - room)
    recent = turns[len(turns) - n_recent :]
    budget = min(budget, free - room - sum(len(c.tokens) for c in recent))
    first = recent[0].idx if recent else (turns[-1].idx + 1 if turns else 1)
    t0 = time.perf_counter()
    owners = [chat.s.owner] + [d.owner for d in chat.docs]
    hits: list[Hit] = []
    if first > 1 or chat.docs:
        mode = chat.lib.settings.recall
        hits = chat.recall.search(owners, query_of(text), mode=mode, limit=32)

    def size(h: Hit, chosen: list[Hit]) -> int | None:
        if h.owner == chat.s.owner:
            return len(chat.chunks[h.chunk].tokens) if 0 < h.chunk < first else None
        n = chat.lib.disk.meta(f"{h.owner}:{h.chunk}").n_tokens
        if all(c.owner != h.owner for c in chosen):  # a document's first excerpt: its frame
            n += sum(len(t) for t in frames[h.owner])
        return n

    picked = pick(hits, size, budget)
    chosen = [(h.owner, h.chunk) for h in picked]
    note = None
    current = [c for c in turns if c.turn > chat.s.turns]  # a long message's blocks
    inside = any(c not in recent for c in current)  # never a note inside the message
    if worth_quoting(chat.recall, chat.lib.settings.recall, picked) and not inside:
        best = picked[0]
        names = {d.owner: d.name for d in chat.docs}
        source = f"From {names[best.owner]}" if best.owner in names else "Said earlier"
        note = quote(chat.tpl, source, "".join(chat.recall.passage_texts([best])))
    seconds = time.perf_counter() - t0
    rank = {d.owner: i for i, d in enumerate(chat.docs)}
    doc_hits = sorted((rank[o], i) for o, i in chosen if o != chat.s.owner)
    mine = sorted(i for o, i in chosen if o == chat.s.owner)
    pages = [system]
    labels: dict[str, str] = {}
    for r, doc in enumerate(chat.docs):
        idxs = [i for rr, i in doc_hits if rr == r]
        if not idxs:
            continue
        opening, closing = frames[doc.owner]
        pages.append(_frame(chat, f"frame:{doc.owner}:open", opening))
        for i in idxs:
            page = chat.page(f"{doc.owner}:{i}")
            pages.append(page)
            labels[page.key] = f"{doc.name} chunk {i}"
        pages.append(_frame(chat, f"frame:{doc.owner}:close", closing))
    for i in mine:
        pages.append(chat.page(chat.s.key(i)))
        labels[chat.s.key(i)] = _label(chat.chunks[i])
    done = [c for c in recent if c.turn <= chat.s.turns]
    pages += [chat.page(chat.s.key(c.idx)) for c in done]
    if note is not None:  # before the new message (and the blocks of it already paged through)
        pages.append(note)
    pages += [chat.page(chat.s.key(c.idx)) for c in recent[len(done) :]]
    return pages, labels, seconds
