"""Answer a question about an ingested document by paging its relevant chunks into the window."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from cascade_cli.config import Settings
from cascade_cli.engine import Context, Sampler, SamplerSettings
from cascade_cli.engine.generate import Generation, generate
from cascade_cli.engine.reasoning import Thought
from cascade_cli.errors import NotFoundError, StoreError
from cascade_cli.paging import catalog, locations
from cascade_cli.paging.library import Library
from cascade_cli.paging.plan import ORDER, QUOTE, Quote, Request
from cascade_cli.paging.plan import plan as layout
from cascade_cli.paging.plan import reserve as reserve_for
from cascade_cli.paging.prompt import frame, question_tokens
from cascade_cli.paging.quotes import copied_quote, rerank_quote
from cascade_cli.paging.recompute import recompute
from cascade_cli.paging.sink import place_sink, sink_key
from cascade_cli.paging.window import Window
from cascade_cli.recall.select import Hit
from cascade_cli.store import ChunkMeta

Notice = Callable[[str], None]
#: Whether the generator reranks the top hits' passages and quotes the best one instead of
#: what the `quote` policy picked (recall.rerank; 'llm' or 'off'); the policy's quotes keep
#: their room in the layout, and stay where nothing could be scored. Off by default: on held-out
#: books it quoted the answer less often than `tops` (4 vs 6 of 37) and cost more than the rest
#: of the ask (BENCHMARKS.md, issue 20).
RERANK = Settings.rerank  # the setting's default (config.py)


def quiet(message: str) -> None:
    return None


@dataclass
class AskResult:
    """What `--json` prints besides the answer text."""

    doc: str
    chunks: list[dict[str, Any]] = field(default_factory=list)
    sink: dict[str, Any] = field(default_factory=dict)
    passages: list[str] = field(default_factory=list)
    #: where the answer's chunks are in the source (paging.locations.sources)
    sources: list[dict[str, Any]] = field(default_factory=list)
    #: the passages the rerank step scored: chunk, passage, score, quoted, text
    quotes: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    answer: str = ""
    #: a reasoning model's thinking before the answer (with `think` on; engine.reasoning)
    reasoning: str = ""


def ensure_indexed(
    ctx: Context, lib: Library, docs: Sequence[catalog.Document], notice: Notice = quiet
) -> None:
    """Give documents ingested before passage recall (or whose recall rows a crash lost) their
    passages, from the chunks' stored token ids, and embed what is not embedded — saying so.
    One query finds them among a whole collection's files."""
    counts = lib.recall.indexed_counts([d.owner for d in docs])
    for doc in docs:
        if counts.get(doc.owner, 0) < doc.chunks:
            _index_again(ctx, lib, doc, notice)
    if lib.recall.semantic:
        lib.recall.flush()
        pending = lib.recall.pending([d.owner for d in docs])
        if pending > 32:
            what = f"'{docs[0].name}'" if len(docs) == 1 else f"{len(docs)} documents"
            notice(f"embedding {pending} passages of {what} for semantic recall (once)")


def _index_again(ctx: Context, lib: Library, doc: catalog.Document, notice: Notice) -> None:
    have = lib.recall.indexed(doc.owner)
    notice(
        f"indexing {doc.chunks - len(have)} chunks of '{doc.name}' for passage recall "
        "(once: it was ingested before passage recall)"
    )
    chars = 0
    for meta in sorted(lib.disk.chunks(doc.owner), key=lambda m: m.index):
        text = ctx.model.detokenize(meta.tokens.tolist())
        if meta.index not in have:
            lib.recall.index(doc.owner, meta.index, text, chars)
        chars += len(text)


def plan(
    ctx: Context,
    lib: Library,
    doc: catalog.Document | Sequence[catalog.Document],
    question: str,
    window: int,
    mode: str,
    top_k: int,
    reserve: int,
    neighbors: int = 1,
    order: str = ORDER,
    quote: str = QUOTE,
    quoted: list[str] | None = None,
    notice: Notice = quiet,
    found: list[Hit] | None = None,
    picked: list[Quote] | None = None,
) -> tuple[list[tuple[str, int]], list[int]]:
    """((owner, chunk index) of the chunks to page in, in window order; question tokens): the
    planner's layout (paging/plan.py) for a question about `doc` (one document or several: one
    ranking across them), with `reserve` positions left for the answer.
    The quoted passages are appended to `quoted`; `found` receives the fused hits (the rerank
    step scores their passages)."""
    fr = frame(ctx.model)
    bare = question_tokens(ctx.model, fr, question)
    req = Request(
        window=window, head=len(fr.prefix), tail=len(bare) + reserve, query=question, mode=mode,
        sources=lib.sources(_listed(doc)), fill=True, top_k=top_k, neighbors=neighbors, order=order,
        quote=quote,
    )  # fmt: skip
    laid = layout(lib.recall, req)
    for note in laid.notes:
        notice(note)
    if found is not None:  # issue 20: rerank (paging.quotes) after the chunks are restored
        found.extend(laid.hits)
    evidence = [q.text for q in laid.quotes]
    q = question_tokens(ctx.model, fr, question, evidence, len(bare) + laid.quote_room)
    if quoted is not None:
        quoted.extend(evidence)
    if picked is not None:
        picked.extend(laid.quotes)
    return list(laid.recalled), q


def _listed(doc: catalog.Document | Sequence[catalog.Document]) -> list[catalog.Document]:
    return [doc] if isinstance(doc, catalog.Document) else list(doc)


def _place(
    lib: Library,
    win: Window,
    chosen: list[dict[str, Any]],
    metas: list[ChunkMeta],
    warm: set[str],
    fresh: dict[str, Any],
    result: AskResult,
    seen: dict[str, str],
    slim: set[str],
) -> tuple[int, ChunkMeta | None]:
    """Place the chunks after the sink; (tokens restored, the first damaged chunk or None).
    ``seen``: the tier each chunk first came from (a pass after a recompute finds it in RAM)."""
    result.chunks = []
    restored = 0
    if win.recurrent:
        return _prefill(lib, win, chosen, metas, warm, result), None
    for entry, meta in zip(chosen, metas, strict=True):
        if meta.key in fresh:
            win.place(fresh[meta.key])
            tier = "recomputed"
        else:
            try:
                state = lib.pager.get(meta.key, at=win.end, slim=meta.key in slim)
                restored += win.place(state)
            except StoreError:  # damaged, or gone from the remote tier as well
                return restored, meta
            tier = lib.pager.tier(meta.key, meta.key in warm)
        tier = seen.setdefault(meta.key, tier)
        result.chunks.append({**entry, "tier": tier})
    return restored, None


def _prefill(
    lib: Library,
    win: Window,
    chosen: list[dict[str, Any]],
    metas: list[ChunkMeta],
    warm: set[str],
    result: AskResult,
) -> int:
    """A recurrent or hybrid model (paging.prefix): the first chunk's stored state is the
    whole state after the sink and that chunk, so it is restored when the chunk comes right
    after the sink; every other chunk is decoded (tier `prefill`). Tokens restored."""
    restored = 0
    for entry, meta in zip(chosen, metas, strict=True):
        tier = "prefill"
        if win.end == meta.pos and not result.chunks:
            try:
                win.restore(lib.pager.get(meta.key), [*win.history, *meta.tokens.tolist()])
                tier = lib.pager.tier(meta.key, meta.key in warm)
                restored += meta.n_tokens
            except StoreError:
                tier = "prefill"
        if tier == "prefill":
            win.append(meta.tokens.tolist())
        result.chunks.append({**entry, "tier": tier})
    lib.disk.stats.add("prefill", "hits", sum(c["tier"] == "prefill" for c in result.chunks))
    return restored


def far_from_the_end(
    ctx: Context, metas: list[ChunkMeta], at: dict[str, int], end: int
) -> set[str]:
    """Keys of chunks whose every cell will sit n_swa or more positions before `end`, where
    decoding starts: a sliding-window model's SWA layers never see them, so only their
    full-attention section is decoded and restored (this window is never slid)."""
    if ctx.layout != "iswa":
        return set()
    n_swa = ctx.model.n_swa
    return {m.key for m in metas if at[m.key] + m.n_tokens <= end - n_swa}


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
    by_owner = {d.owner: d for d in docs}
    ensure_indexed(ctx, lib, docs, notice)
    t0 = time.perf_counter()
    reserve = reserve_for(max_tokens, window)
    win = Window(ctx, window)
    t_recall = time.perf_counter()
    hits: list[Hit] = []
    quotes: list[Quote] = []
    chosen, q = plan(
        ctx, lib, docs, question, window, mode, top_k, reserve, neighbors, order, quote,
        result.passages, notice, hits, quotes,
    )  # fmt: skip
    t_recall = time.perf_counter() - t_recall
    keys = [by_owner[o].chunk_key(i) for o, i in chosen]
    metas = []
    for o, i in chosen:
        d = by_owner[o]
        try:
            metas.append(lib.chunk_meta(d, i))
        except NotFoundError as exc:  # evicted, or the row of a lost file dropped by repair
            gone = set(keys) & lib.disk.evicted(d.owner)
            why = f"{len(gone)} evicted by the disk budget" if gone else exc.message
            group, _, _ = d.name.partition("/")  # a collection's file: ingest its folder again
            again = f"cascade ingest {d.path}" if group == d.name else "cascade ingest DIR"
            raise NotFoundError(
                f"'{d.name}' is missing chunks in the store ({why})",
                f"Run `{again}` again"
                + ("" if group == d.name else f" on the folder of the collection '{group}'")
                + ": it recomputes the missing chunks.",
            ) from None
    entries = [
        {**({"doc": by_owner[o].name} if len(docs) > 1 else {}), "index": i, "tokens": m.n_tokens}
        for (o, i), m in zip(chosen, metas, strict=True)
    ]
    warm = {k for k in keys if k in lib.ram}
    prefix = frame(ctx.model).prefix
    at = {}  # where each chunk will sit: decoded there directly, not shifted afterwards
    pos = len(prefix)
    for meta in metas:
        at[meta.key] = pos
        pos += meta.n_tokens
    slim = far_from_the_end(ctx, metas, at, pos)
    if win.recurrent:  # only the first chunk's state is restored, where it was made
        at, keys = {}, keys[:1]
        note = lib.prefill_notice()
        if note:
            notice(note)
    lib.pager.prefetch([sink_key(prefix), *keys], at, slim)
    t_plan = time.perf_counter()
    fresh: dict[str, Any] = {}  # damaged chunks recomputed in their own context
    sink_tier = ""
    seen: dict[str, str] = {}
    while True:
        tier = place_sink(lib, win, prefix, docs[0].scheme)
        sink_tier = sink_tier or tier  # the first pass's: later ones find it in RAM
        restored, damaged = _place(lib, win, entries, metas, warm, fresh, result, seen, slim)
        if damaged is None:
            break
        # never serve bad bytes: recompute the chunk where ingest made it, then start over
        fresh[damaged.key] = recompute(ctx, lib, by_owner[damaged.owner], damaged)
        win.reset()
    result.sink = {"tokens": len(prefix), "tier": sink_tier}
    recomputed = sum(m.n_tokens for m in metas if m.key in fresh)
    lib.disk.stats.add("window", "misses", len(chosen))
    t_restore = time.perf_counter() - t_plan
    placed = [(i, m, at[m.key]) for (_, i), m in zip(chosen, metas, strict=True) if m.key in at]
    copy = None
    room = window - win.end - reserve
    picked = quotes[0] if len(quotes) == 1 else None
    if rerank == "llm" and not win.recurrent:  # issue 20: the generator picks the quote
        q, reranked = rerank_quote(ctx, lib, win, hits, placed, question, q, room, result)
        picked = reranked or picked
    if picked is not None:  # the quote's cells are in the window already: copy them
        made = copied_quote(ctx, win, picked, placed, question, room)
        if made is not None:
            q, copy = made
    quoted = [picked] if picked is not None else quotes
    if copy is not None:
        win.append_copying(q, *copy, logits="last")
    else:
        win.append(q, logits="last")
    state = Generation(pos=win.end)
    pieces: list[str] = []
    thought: list[str] = []
    first = 0.0
    with Sampler(sampling, ctx.model) as sampler:
        for piece in generate(ctx, sampler, 0, state, max_tokens, limit=window):
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
    gen_time = max(total - (first or total), 1e-9)
    result.answer = "".join(pieces)
    # after the answer: where it came from costs nothing before the first token
    marked = [(x.owner, x.chunk, x.text) for x in quoted] if result.passages else []
    result.sources = locations.cite(lib.conn, docs, chosen, marked)
    result.reasoning = "".join(thought).strip()
    result.timings = {
        "ttft_s": round(first or total, 4),
        "recall_s": round(t_recall, 4),
        "restore_s": round(t_restore, 4),
        "restored_tokens": restored,
        "copied_tokens": copy[2] if copy else 0,
        "prefill_tokens": len(q)
        - (copy[2] if copy else 0)
        + recomputed
        + (len(prefix) if sink_tier == "recomputed" else 0)
        + sum(c["tokens"] for c in result.chunks if c["tier"] == "prefill"),
        "gen_tokens": len(state.tokens),
        "rerank_s": result.timings.get("rerank_s", 0.0),
        "tokens_per_s": round(max(len(state.tokens) - 1, 0) / gen_time, 2),
    }
