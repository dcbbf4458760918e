"""Query-likelihood rerank (recall.rerank): scores from the window's KV equal those of a plain
prefill of the same tokens, and `ask` quotes the passage the generator finds the question most
likely after (real model, real store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cascade_cli.documents.library import Library
from cascade_cli.engine import Context
from cascade_cli.engine.live import Window
from cascade_cli.engine.score import Job, mean_logprobs
from cascade_cli.recall import rerank
from cascade_cli.recall.select import Hit
from cascade_cli.window.ask import AskResult, ask
from tests.documents.helpers import NEEDLE, write_text
from tests.documents.test_ingest_ask import run_ingest

SINK = [1, 504, 3230, 28]  # any few tokens standing for the attention sink


def test_kv_scores_equal_a_prefill_of_the_same_tokens(ctx: Context) -> None:
    m = ctx.model
    chunk = m.tokenize(" The garden was quiet. " + NEEDLE + " Then it rained all day long.")
    other = m.tokenize(" The weather in Bath was fine, and everyone walked to the river.")
    ctx.clear()
    win = Window(ctx, ctx.n_ctx)
    win.append(SINK + chunk + other, logits="none")
    at = len(SINK)
    text = NEEDLE
    span = rerank.token_span(ctx.model, chunk, text)
    assert span is not None and m.detokenize(chunk[span[0] : span[1]]).strip() == text
    start, end = span
    hit = Hit("doc:1", 0, 0.0, 0, ("bm25",))
    after = at + len(chunk)
    cands = [
        rerank.Candidate(hit, text, at + start, at + end),
        rerank.Candidate(hit, "x", after, after + len(other)),
    ]
    before = ctx.state_get(0).tobytes()
    rerank.score(ctx, win.save, len(SINK), cands, "What is the pass key?")
    assert ctx.state_get(0).tobytes() == before  # the window is left as it was
    scratch = ctx.scratch(0)
    assert all(scratch.pos_max(s) < 0 for s in range(scratch.n_seq_max))  # emptied
    q, lead = rerank.question_job(ctx, "What is the pass key?")
    ctx.clear()
    ctx.decode(SINK + chunk[:end], 0, 3, logits="none")
    ctx.seq_rm(3, len(SINK), len(SINK) + start)  # the cells a scoring sequence is given
    (plain,) = mean_logprobs(ctx, [Job(3, len(SINK) + end, q, lead)])
    assert cands[0].score == pytest.approx(plain, abs=0.02)
    assert cands[0].score > cands[1].score  # the pass key's passage explains the question best
    # a question longer than the scratch context's batch is scored on its last tokens
    long_q = "Here is a long text I pasted. " * 60 + "What is the pass key?"
    q, lead = rerank.question_job(ctx, long_q)
    assert len(q) - lead == rerank.QUESTION_MAX and m.detokenize(q).endswith("pass key?")
    ctx.clear()
    win = Window(ctx, ctx.n_ctx)
    win.append(SINK + chunk + other, logits="none")
    rerank.score(ctx, win.save, len(SINK), cands, long_q)
    assert all(c.score > -100 for c in cands)


def test_ask_quotes_the_passage_the_generator_ranks_first(
    ctx: Context, lib: Library, tmp_path: Path
) -> None:
    doc = run_ingest(ctx, lib, write_text(tmp_path / "n.txt", 7000, needle=NEEDLE), "n")
    result = AskResult(doc="n")
    answer = "".join(
        ask(ctx, lib, doc, "What is the pass key?", result, window=512, max_tokens=16, rerank="llm")
    )
    assert "48213" in answer
    assert result.quotes and result.timings["rerank_s"] > 0
    best = max(result.quotes, key=lambda q: q["score"])
    assert best["quoted"] and "48213" in best["text"]
    assert result.passages and "48213" in result.passages[0]
    assert all(q["score"] < 0 for q in result.quotes)
    off = AskResult(doc="n")
    "".join(ask(ctx, lib, doc, "What is the pass key?", off, window=512, max_tokens=16,
                rerank="off"))  # fmt: skip
    assert off.quotes == [] and off.timings["rerank_s"] == 0.0


def test_a_single_candidate_is_quoted_without_a_decode(
    ctx: Context, lib: Library, tmp_path: Path
) -> None:
    """A document of one chunk gives the rerank one passage to choose from: it is quoted as is
    (`score` None), and nothing is decoded to score it."""
    path = tmp_path / "one.txt"
    path.write_text(f"A short note about the harbour.\n\n{NEEDLE}\n", encoding="utf-8")
    doc = run_ingest(ctx, lib, path, "one")
    assert doc.chunks == 1
    calls: list[int] = []
    score = rerank.score

    def counted(*args: object, **kwargs: object) -> None:
        calls.append(1)
        score(*args, **kwargs)  # type: ignore[arg-type]

    rerank.score = counted
    try:
        result = AskResult(doc="one")
        answer = "".join(ask(ctx, lib, doc, "What is the pass key?", result, window=512,
                             max_tokens=16, rerank="llm"))  # fmt: skip
    finally:
        rerank.score = score
    assert not calls
    assert [q["score"] for q in result.quotes] == [None] and result.quotes[0]["quoted"]
    assert "48213" in result.passages[0] and "48213" in answer


def test_a_quote_running_past_the_held_tokens_is_scored_on_what_they_hold(ctx: Context) -> None:
    """A quote's sentence may run on across a chunk edge: the part the chunk's tokens hold (at
    least half of its words) is found, with the words left out before or after it."""
    model = ctx.model
    tokens = model.tokenize("The harbour was quiet. The pass key is 48213, said the keeper")
    quote = "The pass key is 48213, said the keeper of the northern light"
    assert rerank.token_span(model, tokens, quote) is None  # not all of it is there
    part = rerank.held_part(model, tokens, quote)
    assert part is not None and part[2:] == ("", "of the northern light")
    held = model.detokenize(tokens[part[0] : part[1]])
    assert held.strip() == "The pass key is 48213, said the keeper"
    starts = "lit the lamp. The harbour was quiet. The pass key"
    part = rerank.held_part(model, tokens, starts)  # the start is before the held tokens
    assert part is not None and part[2:] == ("lit the lamp.", "")
    assert "lamp" not in model.detokenize(tokens[part[0] : part[1]])
    assert rerank.held_part(model, tokens, "The harbour was quiet at night in the cold") is None
