"""`ask`: a question about ingested documents, laid out and answered by the window engine.

The request is the document frame's sink (documents/frame.py: the system prompt and the user
turn's opening, whose KV ingest computed each chunk after), the chunks the planner recalls
(recall/plan.py) in window order, the quote — a note copying the best passage's cells from its
chunk in the window — and the question. The window engine (window/pages.py) places them as it
places a chat turn's or a served request's pages: restored from RAM, disk or the remote tier,
a damaged chunk recomputed in its ingest context, a recurrent model's longest stored prefix
restored and the rest decoded, a sliding-window model's far chunks restored without their SWA
section; the quote's rerank (the `rerank` setting) is layout.rerank_note, as in chat and serve.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from cascade_cli.config import Settings
from cascade_cli.documents import catalog, locations
from cascade_cli.documents.frame import Frame, frame, question_tail, question_tokens
from cascade_cli.documents.library import Library
from cascade_cli.documents.reindex import Notice, ensure_indexed, quiet
from cascade_cli.documents.sink import OWNER as SINK
from cascade_cli.documents.sink import sink_key
from cascade_cli.engine import Context, Model, Sampler, SamplerSettings
from cascade_cli.engine.generate import Generation, generate
from cascade_cli.engine.live import WINDOW_SEQ
from cascade_cli.engine.reasoning import Thought
from cascade_cli.engine.template import tokenize_parts
from cascade_cli.errors import EngineError, NotFoundError
from cascade_cli.recall.plan import ORDER, QUOTE, Request
from cascade_cli.recall.plan import plan as planned
from cascade_cli.recall.plan import reserve as reserve_for
from cascade_cli.store import ChunkMeta
from cascade_cli.window.layout import Layout, NoteFrame, note, rerank_note
from cascade_cli.window.page import Page
from cascade_cli.window.pages import Pages
from cascade_cli.window.turns import template

#: Whether the generator reranks the top hits' passages and quotes the best one instead of
#: what the `quote` policy picked (recall.rerank; 'llm' or 'off'). Off by default: on held-out
#: books it quoted the answer less often than `tops` (4 vs 6 of 37) and cost more than the rest
#: of the ask (BENCHMARKS.md, issue 20).
RERANK = Settings.rerank  # the setting's default (config.py)
#: The line that introduces the quote, after the excerpts (measured on the needle trials).
LINES = "Most relevant lines:\n"
#: Where the quote goes (config.ASK_NOTES): 'lines' — LINES and the quote in the question's own
#: user turn; 'system' — a system note between the excerpts' user turn and the question's, as in
#: chat (measured per model: docs/models.md).
ASK_NOTE = Settings.ask_note

__all__ = ["AskResult", "ask", "plan", "question_pages"]


@dataclass
class AskResult:
    """What `--json` prints besides the answer text."""

    doc: str
    chunks: list[dict[str, Any]] = field(default_factory=list)
    sink: dict[str, Any] = field(default_factory=dict)
    passages: list[str] = field(default_factory=list)
    #: where the answer's chunks are in the source (documents.locations.sources)
    sources: list[dict[str, Any]] = field(default_factory=list)
    #: the passages the rerank step scored: chunk, passage, score, quoted, text
    quotes: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    answer: str = ""
    #: a reasoning model's thinking before the answer (with `think` on; engine.reasoning)
    reasoning: str = ""


@dataclass
class Asked:
    """A question's layout for the window engine, and the tokens decoded after it."""

    layout: Layout
    message: list[int]
    sink: Page
    #: the chunks recalled, in window order: (owner, chunk index)
    recalled: list[tuple[str, int]]


def question_note(model: Model, fr: Frame) -> NoteFrame:
    """ask's quote note: the excerpts' end, "Most relevant lines:", then "- " and the quote (the
    question follows it in the same user turn)."""
    return NoteFrame(
        model, lambda words: tokenize_parts(model, [(fr.after_doc, True), (LINES, True), (words, False)]),
        [], lambda q: "- ",
    )  # fmt: skip


def system_note(model: Model, fr: Frame, question: str) -> tuple[NoteFrame, list[int]] | None:
    """ask's quote as a system note (`ask_note = "system"`): the excerpts' user turn closed,
    a system message "From <document>: <quote>", then the question as a user turn of its own
    (the note frame, and the tokens after the note). None where the template has no system
    role of its own (Gemma) or cannot be split per message: the quote stays in the question's
    message there."""
    try:
        tpl = template(model)
    except EngineError:
        return None
    if tpl.sys_open == tpl.user_open:
        return None
    nf = NoteFrame(
        model, lambda words: tokenize_parts(model, [(tpl.user_close + tpl.sys_open, True), (words, False)]),
        tpl.special(tpl.sys_close), lambda q: f"From {q.label}: " if q.label else "",
    )  # fmt: skip
    after = tokenize_parts(
        model,
        [(tpl.user_open, True), (question.strip(), False), (fr.after_question + fr.cue, True)],
    )
    return nf, after


def question_pages(
    lib: Library,
    model: Model,
    docs: Sequence[catalog.Document],
    question: str,
    req: Request,
    *,
    copies: bool = True,
    rerank: str = RERANK,
    cue: str = Settings.ask_cue,
    where: str = ASK_NOTE,
) -> Asked:
    """The pages for a question about `docs` under the planner's request `req` (planned with
    the frame's sink as its head and the question's tokens added to its tail): the sink, the
    recalled chunks, and — where the window can copy cells (`copies`) and one passage is
    quoted — a note copying it; else the quoted passages are decoded with the question
    (documents.frame.question_tokens). `where` = 'system' puts the quote in a system note of
    its own (system_note) where the window can copy cells (a recurrent or sliding-window
    model's keeps 'lines': its quote is decoded with the question, its chunks' state saved)."""
    fr = frame(model, cue=cue)
    bare = question_tokens(model, fr, question)
    laid = planned(lib.recall, replace(req, head=len(fr.prefix), tail=req.tail + len(bare)))
    by_owner = {d.owner: d for d in docs}
    sink = _sink(fr.prefix, docs[0].scheme)
    out = Layout([sink], plan=laid)
    source: dict[tuple[str, int], Page] = {}
    for owner, idx in laid.recalled:
        meta = _meta(lib, by_owner[owner], idx)
        # a recurrent model's chunk state is the whole state after the sink and it (ingest)
        first = len(out.pages) == 1 and meta.pos == len(fr.prefix)
        page = Page(
            meta.key, meta.tokens.tolist(), doc=by_owner[owner], whole=meta.key if first else None
        )
        out.pages.append(page)
        source[(owner, idx)] = page
        out.labels[page.key] = f"{by_owner[owner].name} chunk {idx}"
    room = len(bare) + laid.quote_room  # the question's and the quote's, together
    system = system_note(model, fr, question) if where == "system" and copies else None
    if system is not None:
        nf, after = system
        quote = note(nf, laid.quotes, room - len(after), source)
    else:
        nf = question_note(model, fr)
        after = tokenize_parts(model, [("\n\n", True), *question_tail(fr, question)])
        one = copies and len(laid.quotes) == 1
        quote = note(nf, laid.quotes, room - len(after), source) if one else None
    if quote is not None and (quote.copy is not None or system is not None):
        message = after
        if rerank == "llm" and quote.copy is not None:
            names = {d.owner: d.name for d in docs}
            rerank_note(lib, nf, out, source, names, question, len(fr.prefix), quote)
        out.pages.append(quote)
    else:
        message = question_tokens(model, fr, question, [q.text for q in laid.quotes], room)
    return Asked(out, message, sink, list(laid.recalled))


def _sink(prefix: list[int], scheme: str) -> Page:
    key = sink_key(prefix)
    meta = ChunkMeta(
        key=key, owner=SINK, index=0, start=0, end=len(prefix),
        tokens=np.asarray(prefix, dtype=np.int32), pos=0, scheme=scheme, pinned=True,
    )  # fmt: skip
    return Page(key, list(prefix), meta, whole=key)


def _meta(lib: Library, d: catalog.Document, idx: int) -> ChunkMeta:
    try:
        return lib.chunk_meta(d, idx)
    except NotFoundError as exc:  # evicted, or the row of a lost file dropped by repair
        gone = d.chunk_key(idx) in lib.disk.evicted(d.owner)
        why = "evicted by the disk budget" if gone else exc.message
        group, _, _ = d.name.partition("/")  # a collection's file: ingest its folder again
        again = f"cascade ingest {d.path}" if group == d.name else "cascade ingest DIR"
        raise NotFoundError(
            f"'{d.name}' is missing chunks in the store ({why})",
            f"Run `{again}` again"
            + ("" if group == d.name else f" on the folder of the collection '{group}'")
            + ": it recomputes the missing chunks.",
        ) from None


def plan(
    ctx: Context,
    lib: Library,
    doc: catalog.Document | Sequence[catalog.Document],
    question: str,
    window: int,
    mode: str,
    top_k: int,
    reserve: int,
    cue: str = Settings.ask_cue,
    where: str = ASK_NOTE,
) -> tuple[list[tuple[str, int]], list[int]]:
    """((owner, chunk index) of the chunks `ask` pages in, in window order; the tokens decoded
    after them), `reserve` positions left for the answer."""
    docs = _listed(doc)
    req = Request(
        window=window, head=0, tail=reserve, query=question, mode=mode, sources=lib.sources(docs),
        fill=True, top_k=top_k,
    )  # fmt: skip
    asked = question_pages(lib, ctx.model, docs, question, req, cue=cue, where=where)
    quote = [t for p in asked.layout.pages[1:] if p.transient for t in p.tokens]
    return asked.recalled, quote + asked.message


def _listed(doc: catalog.Document | Sequence[catalog.Document]) -> list[catalog.Document]:
    return [doc] if isinstance(doc, catalog.Document) else list(doc)


def ask(
    ctx: Context,
    lib: Library,
    doc: catalog.Document | Sequence[catalog.Document],
    question: str,
    result: AskResult,
    *,
    window: int,
    mode: str = "hybrid",
    top_k: int = 0,
    neighbors: int = 1,
    order: str = ORDER,
    quote: str = QUOTE,
    rerank: str = RERANK,
    max_tokens: int = Settings.ask_tokens,
    cue: str = Settings.ask_cue,
    where: str = ASK_NOTE,
    sampling: SamplerSettings = SamplerSettings(temperature=0, repeat_penalty=1.0, guard="dry"),
    notice: Notice = quiet,
) -> Iterator[str]:
    """Stream the answer about `doc` (one document, or several: a collection's files, ranked
    together); `result` is filled with chunks and timings as it goes.

    Answers quote the document, so no repeat penalty by default: with llama.cpp's usual 1.1 the
    needle benchmark's keys 86387 and 27455 came out as 86392 and 27456 (a repeated digit
    penalised); without it, 86387 and 27455. The repetition guard (`sampling.guard`, 'dry' by
    default) keeps the answer from looping and leaves numbers alone."""
    docs = _listed(doc)
    ensure_indexed(ctx, lib, docs, notice)
    t0 = time.perf_counter()
    reserve = reserve_for(max_tokens, window)
    pages = Pages(ctx, lib, window)
    req = Request(
        window=window, head=0, tail=reserve, query=question, mode=mode, sources=lib.sources(docs),
        fill=True, top_k=top_k, neighbors=neighbors, order=order, quote=quote,
    )  # fmt: skip
    asked = question_pages(
        lib, ctx.model, docs, question, req, copies=pages.win.copies, rerank=rerank, cue=cue,
        where=where,
    )  # fmt: skip
    for line in asked.layout.plan.notes:
        notice(line)
    said = lib.prefill_notice() if pages.win.recurrent else None
    if said:
        notice(said)
    placed = pages.apply(asked.layout.pages, room=len(asked.message) + reserve)
    pages.win.append(asked.message, logits="last")
    _placed(result, asked, pages, placed.by_key, len(docs) > 1)
    pieces: list[str] = []
    thought: list[str] = []
    state = Generation(pos=pages.win.end)
    first = 0.0
    with Sampler(sampling, ctx.model) as sampler:
        for piece in generate(
            ctx, sampler, WINDOW_SEQ, state, max_tokens, limit=window, sentences=True
        ):
            if not first:
                first = time.perf_counter() - t0
            if isinstance(piece, Thought):
                thought.append(piece)
                yield piece
                continue
            if not pieces:
                piece = piece.lstrip()  # the reply follows an "Answer: " cue
                if not piece:
                    continue
            pieces.append(piece)
            yield piece
    total = time.perf_counter() - t0
    result.answer = "".join(pieces)
    result.reasoning = "".join(thought).strip()
    # after the answer: where it came from costs nothing before the first token
    quoted = [(q["owner"], q["chunk"], q["text"]) for q in asked.layout.scored if q["quoted"]]
    quoted = quoted or [(x.owner, x.chunk, x.text) for x in asked.layout.plan.quotes]
    result.sources = locations.cite(lib.conn, docs, asked.recalled, quoted)
    gen_time = max(total - (first or total), 1e-9)
    result.timings = {
        "ttft_s": round(first or total, 4),
        "recall_s": round(asked.layout.plan.recall_s, 4),
        "restore_s": round(placed.seconds - asked.layout.rerank_s, 4),
        "restored_tokens": sum(c["tokens"] for c in result.chunks if c["tier"] not in _MADE),
        "copied_tokens": result.timings.get("copied_tokens", 0),
        "prefill_tokens": placed.decoded + len(asked.message),
        "gen_tokens": len(state.tokens),
        "rerank_s": round(asked.layout.rerank_s, 4),
        "tokens_per_s": round(max(len(state.tokens) - 1, 0) / gen_time, 2),
    }


#: Tiers of pages that were decoded, not restored.
_MADE = {"recomputed", "prefill", "copied"}


def _placed(
    result: AskResult, asked: Asked, pages: Pages, tiers: dict[str, str], named: bool
) -> None:
    """Fill `result` with where each page came from, the quote and the rerank's candidates."""
    recalled = [p for p in asked.layout.pages[1:] if not p.transient]
    result.chunks = [
        {**({"doc": p.doc.name} if named and p.doc else {}), "index": i, "tokens": p.n,
         "tier": tiers.get(p.key, "window")}
        for p, (_, i) in zip(recalled, asked.recalled, strict=True)
    ]  # fmt: skip
    result.sink = {"tokens": asked.sink.n, "tier": tiers.get(asked.sink.key, "window")}
    last = pages.layout[-1] if pages.layout else None
    copied = last.copy if last is not None and tiers.get(last.key) == "copied" else None
    result.timings = {"copied_tokens": copied[3] if copied else 0}
    result.passages = [q.text for q in asked.layout.plan.quotes]
    result.quotes = [
        {k: c[k] for k in ("chunk", "passage", "score", "quoted", "text")}
        for c in asked.layout.scored
    ]
    best = [c["text"] for c in asked.layout.scored if c["quoted"]]
    if best:
        result.passages = best
