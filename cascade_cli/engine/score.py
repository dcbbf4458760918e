"""How likely a continuation is: the mean log-probability of some tokens given what a sequence
already holds, for several sequences in one decode (query-likelihood reranking)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cascade_cli.engine.context import Context
from cascade_cli.errors import EngineError


@dataclass(frozen=True)
class Job:
    """Decode `tokens` into `seq` from position `pos`; score `tokens[scored:]`."""

    seq: int
    pos: int
    tokens: Sequence[int]
    scored: int


def mean_logprobs(ctx: Context, jobs: Sequence[Job]) -> list[float]:
    """Each job's mean natural-log probability of its scored tokens (length-normalised, so
    questions of any length compare), decoding as many jobs per llama_decode as the batch holds.
    The jobs' cells stay in their sequences (the caller removes them)."""
    scores = [0.0] * len(jobs)
    rows: list[tuple[int, int, int]] = []  # job, token it predicts, batch row
    tokens: list[int] = []
    pos: list[int] = []
    seqs: list[int] = []

    def flush() -> None:
        if not tokens:
            return
        ctx.decode_rows(tokens, pos, seqs, [r for _, _, r in rows])
        for job, target, row in rows:
            logits = ctx.logits_at(row).astype(np.float64)
            top = float(logits.max())
            lse = top + float(np.log(np.exp(logits - top).sum()))
            scores[job] += float(logits[target]) - lse
        rows.clear()
        tokens.clear()
        pos.clear()
        seqs.clear()

    for j, job in enumerate(jobs):
        if job.scored < 1:
            raise EngineError("a scored token needs a token before it in the job")
        if len(job.tokens) > ctx.n_batch:
            raise EngineError("a scored continuation is longer than the batch")
        if len(tokens) + len(job.tokens) > ctx.n_batch:
            flush()
        for i, tok in enumerate(job.tokens):
            if job.scored <= i + 1 < len(job.tokens):  # this row predicts a scored token
                rows.append((j, int(job.tokens[i + 1]), len(tokens)))
            tokens.append(int(tok))
            pos.append(job.pos + i)
            seqs.append(job.seq)
    flush()
    return [s / max(1, len(job.tokens) - job.scored) for s, job in zip(scores, jobs, strict=True)]
