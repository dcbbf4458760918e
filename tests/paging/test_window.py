"""Window.place: chunks land at the window's end, moved by cascade or, as a fallback, llama.cpp."""

from __future__ import annotations

import numpy as np

from cascade_cli import kv
from cascade_cli.engine import Context
from cascade_cli.paging.window import SCRATCH_SEQ, WINDOW_SEQ, Window
from tests.kl import kl_rows
from tests.paging.helpers import sample_text


def test_place_moves_chunks_like_llama_seq_add(ctx: Context) -> None:
    toks = ctx.model.tokenize(sample_text(2000))
    head, chunk, nxt = toks[:37], toks[100:200], toks[200:204]
    ctx.decode(chunk, 300, SCRATCH_SEQ, logits="none")  # saved far from where it will go
    blob = ctx.state_get(SCRATCH_SEQ).copy()
    ctx.seq_rm(SCRATCH_SEQ)
    logits = []
    for own_shift in (True, False):
        win = Window(ctx, 512)
        assert win.rope is not None  # the default model's RoPE is reproduced exactly
        if not own_shift:
            win.rope = None  # as for a model cascade cannot re-rope: llama.cpp's seq_add
        win.append(head)
        assert win.place(blob) == len(chunk)
        assert (ctx.pos_min(WINDOW_SEQ), ctx.pos_max(WINDOW_SEQ)) == (0, 136)
        assert ctx.pos_max(SCRATCH_SEQ) < 0  # scratch emptied
        logits.append(win.append(nxt, logits="all"))
        assert win.end == 141
        win.reset()
    assert kv.header(blob).positions[0] == 300  # the caller's state is not modified
    assert float(kl_rows(logits[0], logits[1]).max()) < 0.02
    assert np.array_equal(logits[0].argmax(1), logits[1].argmax(1))
