"""`ask`'s quote, after the chunks are restored: copied from the window (the quoted passage's
cells are already there, in its chunk), or, with `--rerank llm` (issue 20), chosen by the
generator's query likelihood from the window's own KV (recall.rerank, whose candidates chat and
the server make the same way). Kept apart from the
planner so that one call moves."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from cascade_cli.engine import Context, Model
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
    """The question tokens to decode, quoting the best-scoring candidate (rerank.candidates:
    the quotes of the first hits, scored on their restored cells) where any was scored and it
    fits `room` tokens (else `q` unchanged), and that quote (None: not made). `placed`: (chunk
    index, meta, window position) of each restored chunk. Fills result.quotes and
    timings["rerank_s"]."""
    t0 = time.perf_counter()
    chosen = None

    def quote_of(hit: Hit) -> str:
        held = {idx for idx, meta, _ in placed if meta.owner == hit.owner}
        return lib.recall.quote_text(hit, question, QUOTE_WORDS, held) if hit.chunk in held else ""

    def cells_of(hit: Hit, text: str) -> tuple[int, int] | None:
        found = _cells(ctx, placed, hit.owner, hit.chunk, unmarked(text)[0], rerank.held_span)
        return None if found is None else (found[1] + found[2], found[1] + found[3])

    scorable = ctx.layout != "iswa" and ctx.n_seq_max >= 2  # a spare sequence to score in
    cands = rerank.candidates(hits, quote_of, cells_of) if scorable else []
    if cands:
        if len(cands) > 1:  # one candidate is quoted without a decode: there is no choice
            sink = len(frame(ctx.model).prefix)
            rerank.score(ctx, win.save, sink, cands, question)
        best = max(cands, key=lambda c: c.score)
        mine = question_tokens(ctx.model, frame(ctx.model), question, [best.text])
        if len(mine) <= room:
            q = mine
            result.passages = [best.text]
            chosen = Quote(best.text, best.hit.owner, best.hit.chunk, "")
        result.quotes = [
            {"chunk": c.hit.chunk, "passage": c.hit.passage,
             "score": round(c.score, 4) if len(cands) > 1 else None,
             "quoted": c is best and q is mine, "text": c.text}
            for c in cands
        ]  # fmt: skip
    result.timings["rerank_s"] = round(time.perf_counter() - t0, 4)
    return q, chosen


def _cells(
    ctx: Context,
    placed: Sequence[tuple[int, ChunkMeta, int]],
    owner: str,
    chunk: int,
    text: str,
    find: Callable[[Model, Sequence[int], str], tuple[int, int] | None] = rerank.token_span,
) -> tuple[list[int], int, int, int] | None:
    """Where the window holds `text`: (the run of restored tokens it is in, the run's window
    position, the text's tokens [a, b) in the run by `find`), the run being `chunk` with the
    neighbours restored right before and after it (a passage across a chunk edge continues);
    None where the window does not hold it. The rerank scores what the window holds of a
    quote (rerank.held_span); a copy needs all of it."""
    where = {idx: (meta, at) for idx, meta, at in placed if meta.owner == owner}
    if chunk not in where:
        return None
    meta, start = where[chunk]
    run = meta.tokens.tolist()
    before = where.get(chunk - 1)
    if before is not None and before[1] + before[0].n_tokens == start:
        run, start = before[0].tokens.tolist() + run, before[1]
    after = where.get(chunk + 1)
    if after is not None and after[1] == start + len(run):
        run += after[0].tokens.tolist()
    span = find(ctx.model, run, text)
    return None if span is None else (run, start, *span)


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
    copied (`Window.copies`; the text not in the window: _cells) or the tokens would pass
    `most`."""
    if not win.copies:
        return None
    text, cut_start, cut_end = unmarked(quote.text)
    found = _cells(ctx, placed, quote.owner, quote.chunk, text)
    if found is None:
        return None
    run, start, a, b = found
    tokens, to = quoted_question(
        ctx.model, frame(ctx.model), question, run[a:b], (cut_start, cut_end)
    )
    return (tokens, (to, start + a, b - a)) if len(tokens) <= most else None
