"""Query-likelihood reranking (UPR, Sachan et al. 2022): a candidate passage is scored by the
generator's own length-normalised log P(question | passage) — no training, no second model.

The passages' chunks are already in the window when a question is reranked, so a candidate is
scored from that KV, not by prefilling its text: a scoring sequence holds the window's
attention-sink cells and the passage's own cells, copied into a small scratch context beside the
window (those before and after the passage left out, though a chunk's cells carry what ingest's
sliding window saw before them), and decodes only a short cue and the question's tokens. Up to
one candidate per spare sequence is scored in each decode.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cascade_cli.engine import Context, Model
from cascade_cli.engine.context import Buffer
from cascade_cli.engine.score import Job, mean_logprobs
from cascade_cli.recall.select import Hit

RERANKS = ("llm", "off")
#: Candidates scored per ask, chat turn or request: the quotes of the first N fused hits whose
#: cells the window holds (BENCHMARKS.md: chosen on Emma).
N = 3
#: What the question follows when scored (the scored tokens are the question's only).
CUE = "\n\nQuestion:"
#: A longer question is scored on its last tokens (a question after a pasted text ends with
#: what it asks); keeps every scoring job within one decode of the scratch context's batch.
QUESTION_MAX = 192
#: The window's first cells copied before each passage (its attention sink: the frame, a chat's
#: system prompt); a long system prompt is cut here so the scratch context stays small.
SINK_MAX = 256


@dataclass
class Candidate:
    """A quote to score: the hit it quotes, its text, and its cells' window positions
    [start, end)."""

    hit: Hit
    text: str
    start: int
    end: int
    score: float = field(default=-math.inf)


def token_span(model: Model, tokens: Sequence[int], passage: str) -> tuple[int, int] | None:
    """The tokens [start, end) of a chunk's `tokens` that hold `passage` (from the token its
    first character is in through the one its last is in; None: the chunk's text does not
    hold it). White space matches any white space: a quote joins passages with one space
    where the text may break a paragraph."""
    return _Spans(model, tokens).find(passage.split())


def held_part(model: Model, tokens: Sequence[int], quote: str) -> tuple[int, int, str, str] | None:
    """token_span of `quote`, else of the most of its first or last words that `tokens` hold
    (at least half of them), with the words it leaves out before and after: a quote's sentence
    may run on across a chunk edge (those words are decoded, the rest copied). None: not
    held."""
    spans, words = _Spans(model, tokens), quote.split()
    for k in range(len(words), (len(words) + 1) // 2 - 1, -1):
        for a in (0,) if k == len(words) else (0, len(words) - k):
            found = spans.find(words[a : a + k])
            if found is not None:
                return found[0], found[1], " ".join(words[:a]), " ".join(words[a + k :])
    return None


class _Spans:
    """Token spans of word runs in one token sequence's text."""

    def __init__(self, model: Model, tokens: Sequence[int]) -> None:
        self.pieces = [model.token_bytes(int(t)) for t in tokens]
        self.text = b"".join(self.pieces).decode("utf-8", "replace")

    def find(self, words: Sequence[str]) -> tuple[int, int] | None:
        if not words:
            return None
        found = re.search(r"\s+".join(map(re.escape, words)), self.text)
        if found is None:
            return None
        first = len(self.text[: found.start()].encode("utf-8"))
        need = len(self.text[: found.end()].encode("utf-8"))
        start, total = -1, 0
        for i, piece in enumerate(self.pieces):
            total += len(piece)
            if start < 0 and total > first:
                start = i
            if total >= need:
                return start, i + 1
        return max(start, 0), len(self.pieces)


def candidates(
    hits: Sequence[Hit],
    quote_of: Callable[[Hit], str],
    cells_of: Callable[[Hit, str], tuple[int, int] | None],
    n: int = N,
) -> list[Candidate]:
    """What `ask`, chat and the server score: of the first hits, the quote each would give
    (`quote_of`, Recall.quote_text; '' where its chunk is not in the window) whose cells the
    window holds (`cells_of`: their positions [start, end), None where not), distinct quotes,
    at most `n`. The text scored is the text quoted."""
    out: list[Candidate] = []
    for hit in hits:
        if len(out) >= n:
            break
        text = quote_of(hit)
        if not text or any(c.text == text for c in out):
            continue
        span = cells_of(hit, text)
        if span is not None:
            out.append(Candidate(hit, text, *span))
    return out


def question_job(ctx: Context, question: str) -> tuple[list[int], int]:
    """(cue and question tokens, how many lead in unscored); at most QUESTION_MAX scored."""
    cue = ctx.model.tokenize(CUE)
    tokens = ctx.model.tokenize(CUE + " " + " ".join(question.split()))
    if len(tokens) - len(cue) > QUESTION_MAX:
        tokens = cue + tokens[-QUESTION_MAX:]
    return tokens, len(cue)


def score(
    ctx: Context,
    save: Callable[[int, int], Buffer],
    sink: int,
    cands: Sequence[Candidate],
    question: str,
) -> None:
    """Set each candidate's score: the mean log-probability of the question's tokens after the
    sink's cells (positions [0, sink)) and the passage's. Both are taken from the window
    (`save(p0, p1)`: its seq-state blob of the cells in [p0, p1)) into the context's scratch
    context, where the question attends over them alone — in the window it would attend over
    every cell the window holds, most of a scoring decode's cost at 4,096 cells. One decode per
    group of candidates (one per spare sequence)."""
    if not cands:
        return
    sink = min(sink, SINK_MAX)
    tokens, lead = question_job(ctx, question)
    sizes = sorted(c.end - c.start + len(tokens) for c in cands)
    scratch = ctx.scratch(sink + sum(sizes[-(ctx.n_seq_max - 1) :]))
    seqs = range(1, scratch.n_seq_max)
    scratch.clear()
    try:
        if sink:
            scratch.state_set(0, save(0, sink))
        for first in range(0, len(cands), len(seqs)):
            group = cands[first : first + len(seqs)]
            jobs = []
            for seq, cand in zip(seqs, group, strict=False):
                scratch.state_set(seq, save(cand.start, cand.end))
                if sink:
                    scratch.seq_cp(0, seq, 0, sink)
                jobs.append(Job(seq, cand.end, tokens, lead))
            for cand, value in zip(group, mean_logprobs(scratch, jobs), strict=True):
                cand.score = value
            for seq in seqs:
                scratch.seq_rm(seq)
    finally:
        scratch.clear()
