"""Window.place: chunks land at the window's end, moved by cascade or, as a fallback, llama.cpp."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import numpy as np
import pytest

from cascade_cli import kv
from cascade_cli.engine import Context, Model
from cascade_cli.engine.live import SCRATCH_SEQ, WINDOW_SEQ, Window
from cascade_cli.errors import ContextFullError
from cascade_cli.kv import blob as kvblob
from tests.documents.helpers import BLOCK, WINDOW, sample_text
from tests.kl import kl_rows


@pytest.fixture()
def ctx(model: object) -> Iterator[Context]:
    with Context(
        cast(Model, model), n_ctx=WINDOW + BLOCK + 256, n_seq_max=4, n_batch=BLOCK, n_threads=1
    ) as c:
        yield c


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


def test_deferred_tokens_decode_with_the_next_append(ctx: Context) -> None:
    """`defer` gives tokens their positions at once and decodes them in the next append's batch
    (same logits as decoding them first); any other operation decodes them first, and a cut
    below them forgets them undecoded."""
    toks = ctx.model.tokenize(sample_text(1000))
    head, note, msg = toks[:40], toks[40:42], toks[42:60]
    win = Window(ctx, 512)
    win.append(head + note)
    plain = win.append(msg, logits="last")
    win.reset()
    win.append(head)
    win.defer(note)
    assert win.end == 42 and ctx.pos_max(WINDOW_SEQ) == 39  # positions taken, not decoded
    merged = win.append(msg, logits="last")
    assert win.end == 60 and ctx.pos_max(WINDOW_SEQ) == 59 and not win.pending
    assert float(kl_rows(plain[None, :], merged[None, :]).max()) < 1e-3
    win.defer(toks[60:63])
    win.save(0, 10)  # anything that reads the cells decodes the deferred tokens first
    assert ctx.pos_max(WINDOW_SEQ) == 62 and not win.pending
    win.defer(toks[63:66])
    win.truncate(63)  # cut below them: never decoded
    assert (win.end, ctx.pos_max(WINDOW_SEQ), win.pending) == (63, 62, [])


def test_copied_cells_take_the_positions_after_the_decoded_tokens(ctx: Context) -> None:
    """append_copying: tokens[:to] decoded, the cells [src, src + n) placed after them with V
    bit for bit, the rest decoded (or deferred) after them."""
    toks = ctx.model.tokenize(sample_text(1000))
    win = Window(ctx, 512)
    win.append(toks[:100])
    note = toks[200:203] + toks[20:30] + toks[210:212]
    win.append_copying(note, 3, 20, 10, logits="defer")
    assert win.end == 115 and len(win.pending) == 2 and ctx.pos_max(WINDOW_SEQ) == 112
    src, dst = kvblob.parse(win.save(20, 30)), kvblob.parse(win.save(103, 113))
    assert list(dst.header.positions) == list(range(103, 113))
    for layer in range(len(src.v)):
        assert np.array_equal(src.v_rows(layer), dst.v_rows(layer))
    assert ctx.pos_max(WINDOW_SEQ) == 114  # save decoded the deferred closing tokens


def test_a_failed_decode_with_deferred_tokens_leaves_no_position_counted(ctx: Context) -> None:
    """When the append that carries deferred tokens fails (here the context runs out of
    cells), neither they nor the new tokens stay: the window ends where its cells end, and a
    cut back to where the caller started (chat undoing the turn) does not count them again."""
    toks = ctx.model.tokenize(sample_text(40000))
    win = Window(ctx, 4 * ctx.n_ctx)  # positions to spare: the cells run out first
    win.append(toks[: ctx.n_ctx - 40])
    start = win.end
    win.defer(toks[1000:1010])
    assert win.end == start + 10
    with pytest.raises(ContextFullError):
        win.append(toks[2000 : 2000 + ctx.n_batch // 2])
    assert (win.end, ctx.pos_max(WINDOW_SEQ), win.pending) == (start, start - 1, [])
    win.truncate(start + 10)  # the caller's own undo, from before the deferred tokens failed
    assert win.end == start and ctx.pos_max(WINDOW_SEQ) == start - 1
    win.append(toks[3000:3005])  # the window goes on from its real end
    assert win.end == start + 5 and ctx.pos_max(WINDOW_SEQ) == start + 4


def test_advance_counts_tokens_a_generation_decoded_itself(ctx: Context) -> None:
    """`advance` counts tokens decoded straight into the window sequence (the reply), whatever
    `truncate` does (it only ever cuts)."""
    toks = ctx.model.tokenize(sample_text(2000))
    win = Window(ctx, 512)
    win.append(toks[:50])
    ctx.decode(toks[50:60], 50, WINDOW_SEQ, logits="none")  # as generate() does
    win.advance(toks[50:60])
    assert win.end == 60 and ctx.pos_max(WINDOW_SEQ) == 59
    win.truncate(80)  # past the end: nothing to cut, nothing counted
    assert win.end == 60
    win.append(toks[60:65])
    assert win.end == 65 and ctx.pos_max(WINDOW_SEQ) == 64


def test_cells_saved_after_a_move_hold_keys_for_their_new_positions(ctx: Context) -> None:
    """llama.cpp re-ropes moved cells only on the next decode: a state read before it carried
    keys roped for the old positions (a chat note or rerank copied from a turn that had just
    slid, a page stashed after a slide). `save` applies the pending shift first."""
    toks = ctx.model.tokenize(sample_text(1000))
    a, b, nxt = toks[:40], toks[40:100], toks[100:104]
    win = Window(ctx, 512)
    win.append(a + b)
    win.drop(0, 40)  # b slides down 40 positions (llama.cpp's seq_add), nothing decoded since
    blob = win.save(0, 60).copy()
    in_place = win.append(nxt, logits="all")
    win.reset()
    assert win.place(blob) == 60 and win.end == 60
    restored = win.append(nxt, logits="all")
    assert float(kl_rows(in_place, restored).max()) < 0.02
    assert np.array_equal(in_place.argmax(1), restored.argmax(1))
