"""`ask`'s quote, after the chunks are restored: copied from the window (the quoted passage's
cells are already there, in its chunk), or, with `--rerank llm` (issue 20), chosen by the
generator's query likelihood from the window's own KV (recall.rerank). Kept apart from the
planner so that one call moves."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from cascade_cli.engine import Context
from cascade_cli.paging.library import Library
from cascade_cli.paging.plan import QUOTE_WORDS, Quote
from cascade_cli.paging.prompt import frame, question_tokens, quoted_question
from cascade_cli.paging.window import Window
from cascade_cli.recall import rerank
from cascade_cli.recall.focus import unmarked
from cascade_cli.recall.select import Hit
from cascade_cli.store import ChunkMeta


def rerank_quote(
    ctx: Context,
    lib: Library,
    win: Window,
    hits: Sequence[Hit],
    placed: Sequence[tuple[int, ChunkMeta, int]],
    question: str,
    q: list[int],
    room: int,
    result: Any,
) -> tuple[list[int], Quote | None]:
    """The question tokens to decode, quoting the best-scoring candidate passage where any was
    scored and its quote fits `room` tokens (else `q` unchanged), and that quote (None: not
    made). `placed`: (chunk index, meta, window position) of each restored chunk. Fills
    result.quotes and timings["rerank_s"]."""
    t0 = time.perf_counter()
    chosen = None
    by_chunk = {idx: (at, meta.tokens.tolist()) for idx, meta, at in placed}
    cands = (
        []
        if ctx.layout == "iswa" or ctx.n_seq_max < 2
        else rerank.candidates(ctx, lib.recall, hits, by_chunk)
    )
    if cands:
        if len(cands) > 1:  # one candidate is quoted without a decode: there is no choice
            sink = len(frame(ctx.model).prefix)
            rerank.score(ctx, win.save, sink, cands, question)
        best = max(cands, key=lambda c: c.score)
        text = lib.recall.quote_text(best.hit, question, QUOTE_WORDS, set(by_chunk))
        mine = question_tokens(ctx.model, frame(ctx.model), question, [text])
        if text and len(mine) <= room:
            q = mine
            result.passages = [text]
            chosen = Quote(text, best.hit.owner, best.hit.chunk, "")
        result.quotes = [
            {"chunk": c.hit.chunk, "passage": c.hit.passage,
             "score": round(c.score, 4) if len(cands) > 1 else None,
             "quoted": c is best and q is mine, "text": c.text}
            for c in cands
        ]  # fmt: skip
    result.timings["rerank_s"] = round(time.perf_counter() - t0, 4)
    return q, chosen


def copied_quote(
    ctx: Context,
    win: Window,
    quote: Quote,
    placed: Sequence[tuple[int, ChunkMeta, int]],
    question: str,
    most: int,
) -> tuple[list[int], tuple[int, int, int]] | None:
    """The question tokens quoting `quote` with its chunk's own tokens, and (where they start,
    their window position, count) for Window.append_copying; None where the cells cannot be
    copied (`Window.copies`; the text not in the quote's chunk and the neighbours restored
    right before and after it, where a passage across a chunk edge continues) or the tokens
    would pass `most`."""
    where = {idx: (meta, at) for idx, meta, at in placed}
    if not win.copies or quote.chunk not in where:
        return None
    meta, start = where[quote.chunk]
    run = meta.tokens.tolist()
    before = where.get(quote.chunk - 1)
    if before is not None and before[1] + before[0].n_tokens == start:
        run, start = before[0].tokens.tolist() + run, before[1]
    after = where.get(quote.chunk + 1)
    if after is not None and after[1] == start + len(run):
        run += after[0].tokens.tolist()
    text, cut_start, cut_end = unmarked(quote.text)
    span = rerank.token_span(ctx.model, run, text)
    if span is None:
        return None
    a, b = span
    tokens, to = quoted_question(
        ctx.model, frame(ctx.model), question, run[a:b], (cut_start, cut_end)
    )
    return (tokens, (to, start + a, b - a)) if len(tokens) <= most else None
