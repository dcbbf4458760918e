"""A conversation's window as pages: the planner's layout (recall/plan.py) for chat sessions and
the server's requests alike.

The window holds the system prompt, then the excerpts recalled from documents (each document's
inside a user turn that names it), then the conversation's recalled turns in conversation order,
then the newest turns; the quote — the passages recall ranked best, in a short system note — sits
right before the message being answered (before a long message's stored blocks, never inside
them). Recall and quoting happen only once the conversation no longer fits, or when documents are
in it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cascade_cli.documents import catalog as docs
from cascade_cli.documents.library import Library
from cascade_cli.engine import Model
from cascade_cli.engine.live import Window
from cascade_cli.recall import rerank
from cascade_cli.recall.focus import CUT, unmarked
from cascade_cli.recall.passages import SPEAKER
from cascade_cli.recall.plan import (
    QUOTE_ROOM,
    QUOTE_WORDS,
    Plan,
    Quote,
    Request,
    Turn,
    plan,
    query_of,
)
from cascade_cli.recall.rerank import held_part
from cascade_cli.recall.select import Hit
from cascade_cli.store.address import address
from cascade_cli.window.page import Page
from cascade_cli.window.turns import Template


@dataclass
class Layout:
    """Pages in window order, labels of recalled chunks by key, and the plan behind them."""

    pages: list[Page]
    labels: dict[str, str] = field(default_factory=dict)
    plan: Plan = field(default_factory=Plan)
    #: with the `rerank` setting 'llm', once the window is laid out: the notes' passages scored
    #: (owner, chunk, score, quoted, text, label) and the seconds scoring took
    scored: list[dict[str, Any]] = field(default_factory=list)
    rerank_s: float = 0.0

    @property
    def tokens(self) -> int:
        return sum(p.n for p in self.pages)


def frames(tpl: Template, documents: Sequence[docs.Document]) -> dict[str, tuple[list[int], ...]]:
    """Template tokens around each document's excerpts (decoded when placed, never stored)."""
    return {
        d.owner: (
            tpl.special(tpl.user_open) + tpl.plain(f"Excerpts from the document {d.name}:\n\n"),
            tpl.special(tpl.user_close),
        )
        for d in documents
    }


#: The role of the quote note: 'system' (a system message) or 'user' (a user message of its own,
#: right before the question's). See BENCHMARKS.md, "one planner", for how they measured.
NOTE_ROLE = "system"
#: Whether a one-passage note copies the passage's cells from its recalled chunk in the window
#: (moved to the note's positions) instead of decoding its tokens; see BENCHMARKS.md, "Quotes".
COPY_QUOTE = True


@dataclass(frozen=True)
class NoteFrame:
    """How a quote note is framed: its tokens up to a quoted line's first words (`lead`, given
    those words), its closing tokens (`tail`), and the words that name a quote (`label`)."""

    model: Model
    lead: Callable[[str], list[int]]
    tail: list[int]
    label: Callable[[Quote], str]


def conversation_note(tpl: Template) -> NoteFrame:
    """A chat turn's and a served request's note: a system message (NOTE_ROLE) of lines
    "From <document chunk or turn>: <passage>"."""
    if NOTE_ROLE == "user":
        head = tpl.special(tpl.user_open) + tpl.plain("Earlier in this conversation:\n")
        tail = tpl.special(tpl.user_close)
    else:
        head, tail = tpl.special(tpl.sys_open), tpl.special(tpl.sys_close)
    return NoteFrame(
        tpl.model, lambda words: head + tpl.plain(words), tail,
        lambda q: f"From {q.label}: " if q.label else "",
    )  # fmt: skip


def note(
    nf: NoteFrame,
    quotes: Sequence[Quote],
    room: int = QUOTE_ROOM,
    source: Mapping[tuple[str, int], Page] | None = None,
) -> Page | None:
    """A short note quoting the recalled passages, placed before the message: the recalled
    chunks keep their place in conversation order, and a small model that would not copy a
    fact across thousands of tokens reads it again next to the question. Transient: made
    wherever it is placed, never stored or kept. At most `room` tokens. A single quote whose
    chunk is in `source` (the pages recalled into the window) is the chunk's own tokens, so
    the window can copy its cells there (Page.copy) instead of decoding them."""
    if not quotes:
        return None
    model = nf.model
    labels = [nf.label(q) for q in quotes]
    src = (source or {}).get((quotes[0].owner, quotes[0].chunk))
    if COPY_QUOTE and len(quotes) == 1 and src is not None:
        text, cut_start, cut_end = unmarked(quotes[0].text)
        said = SPEAKER.match(text)  # a turn's indexed text names its speaker; its tokens do not
        part = held_part(model, src.tokens, text[said.end() if said else 0 :])
        if part is not None:  # what runs on across the chunk's edge is decoded around it
            a, b, before, after = part
            words = labels[0] + (f"{CUT} " if cut_start else "") + (f"{before} " if before else "")
            if model.token_bytes(src.tokens[a])[:1].isspace():
                words = words.rstrip(" ")  # the quoted tokens bring their own space
            lead = nf.lead(words)
            rest = (f" {after}" if after else "") + (f" {CUT}" if cut_end else "")
            end = model.tokenize(rest, add_special=False) if rest else []
            most = a + room - len(lead) - len(end) - len(nf.tail)
            if b > most and after:  # no room for the rest: cut where the copy ends
                end = model.tokenize(f" {CUT}", add_special=False)
                most = a + room - len(lead) - len(end) - len(nf.tail)
            b = min(b, most)
            if b > a:
                tokens = lead + src.tokens[a:b] + end + nf.tail
                return Page(
                    _note_key(tokens), tokens, transient=True, copy=(src.key, a, len(lead), b - a)
                )
    lines = [label + " ".join(q.text.split()) for label, q in zip(labels, quotes, strict=True)]
    tokens = nf.lead("\n".join(lines))[: max(0, room - len(nf.tail))] + nf.tail
    return Page(_note_key(tokens), tokens, transient=True)


def _note_key(tokens: Sequence[int]) -> str:
    return "quote:" + address(list(tokens))


def lay_out(
    lib: Library,
    tpl: Template,
    *,
    window: int,
    system: Page,
    history: Sequence[tuple[Turn, Page]],
    tail: int,
    query: str,
    documents: Sequence[docs.Document] = (),
    page_of: Callable[[str], Page],
    labels: Mapping[str, str] | None = None,
    prepare: Callable[[list[Turn]], None] | None = None,
) -> Layout:
    """The window for the next message: `history` (oldest first, each piece with its page),
    `tail` tokens decoded after the layout (the message's open end and the reply's reserve).
    `page_of` gives a document chunk's page; `labels` names the conversation's pieces;
    `prepare` is given the pieces that leave the window before recall searches them."""
    around = frames(tpl, documents)
    sources = lib.sources(documents, {o: sum(len(t) for t in ts) for o, ts in around.items()})
    req = Request(
        window=window, head=system.n, tail=tail, query=query, mode=lib.settings.recall,
        history=[t for t, _ in history], sources=sources, order="document", prepare=prepare,
        quote=lib.settings.quote,
    )  # fmt: skip
    laid = plan(lib.recall, req)
    by_key = {t.key: p for t, p in history}
    key_of = {(t.owner, t.index): t.key for t, _ in history}
    names = {d.owner: d.name for d in documents}
    out = Layout([system], plan=laid)
    source: dict[tuple[str, int], Page] = {}  # recalled pages, by (owner, chunk)
    for owner, idx in laid.recalled:  # documents first, each in its frame; then the turns
        if owner in around:
            opening, closing = around[owner]
            if not out.pages[-1].key.startswith(f"{owner}:"):
                out.pages.append(Page(f"frame:{owner}:open", opening, stored=False))
            page = page_of(f"{owner}:{idx}")
            out.pages.append(page)
            source[(owner, idx)] = page
            out.labels[page.key] = f"{names[owner]} chunk {idx}"
            nxt = laid.recalled.index((owner, idx)) + 1
            if nxt >= len(laid.recalled) or laid.recalled[nxt][0] != owner:
                out.pages.append(Page(f"frame:{owner}:close", closing, stored=False))
        else:
            key = key_of[(owner, idx)]
            out.pages.append(by_key[key])
            source[(owner, idx)] = by_key[key]
            out.labels[key] = (labels or {}).get(key, key)
    done = [t for t in laid.kept if not t.current]
    out.pages += [by_key[t.key] for t in done]
    nf = conversation_note(tpl)
    quote = note(nf, laid.quotes, laid.quote_room, source)
    if quote is not None:
        if lib.settings.rerank == "llm":
            rerank_note(lib, nf, out, source, names, query, system.n, quote)
        out.pages.append(quote)
    out.pages += [by_key[t.key] for t in laid.kept if t.current]
    return out


def rerank_note(
    lib: Library,
    nf: NoteFrame,
    out: Layout,
    source: Mapping[tuple[str, int], Page],
    names: Mapping[str, str],
    query: str,
    sink: int,
    first: Page,
) -> None:
    """Let the note `first` become, once the window holds the recalled pages, the note the
    generator finds the question likeliest after (the `rerank` setting 'llm', for ask, chat and
    serve alike; rerank.candidates, rerank.score): of the first rerank.N recalled hits, the
    quotes whose notes copy their cells, scored on those cells in the window (one candidate is
    quoted without a decode); `out.scored`, `out.rerank_s`."""
    question = query_of(query)
    if first.copy is None:
        return

    def choose(win: Window, at: Mapping[str, int], most: int) -> Page:
        if not win.copies or win.ctx.n_seq_max < 2:
            return first
        t0 = time.perf_counter()
        notes: dict[str, Page] = {}

        def quote_of(h: Hit) -> str:
            if (h.owner, h.chunk) not in source:
                return ""
            held = {c for o, c in source if o == h.owner}
            return lib.recall.quote_text(h, question, QUOTE_WORDS, held)

        def cells_of(h: Hit, text: str) -> tuple[int, int] | None:
            quote = Quote(text, h.owner, h.chunk, names.get(h.owner, ""))
            page = note(nf, [quote], out.plan.quote_room, source)
            if page is None or page.copy is None or page.n > most or page.copy[0] not in at:
                return None
            key, offset, _, n = page.copy
            notes[text] = page
            return at[key] + offset, at[key] + offset + n

        cands = rerank.candidates(out.plan.hits, quote_of, cells_of)
        if not cands:
            return first
        if len(cands) > 1:  # one candidate is quoted without a decode: there is no choice
            rerank.score(win.ctx, win.save, sink, cands, question)
        best = max(cands, key=lambda c: c.score)
        out.scored = [
            {"owner": c.hit.owner, "chunk": c.hit.chunk, "passage": c.hit.passage,
             "score": round(c.score, 4) if len(cands) > 1 else None, "quoted": c is best,
             "text": c.text, "label": out.labels.get(source[(c.hit.owner, c.hit.chunk)].key, "")}
            for c in cands
        ]  # fmt: skip
        out.rerank_s = time.perf_counter() - t0
        return notes[best.text]

    first.choose = choose
