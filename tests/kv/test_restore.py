"""End to end: a q8-decoded blob restored with Context.state_set predicts like the original."""

from __future__ import annotations

import numpy as np

from cascade_cli import kv
from tests.kl import kl_rows


def test_q8_restore_gives_close_logits(model: object, tokens: list[int]) -> None:
    from cascade_cli.engine import Context

    chunk, nxt = tokens[:96], tokens[96:100]
    with Context(model, 256, n_seq_max=2, flash_attn="off") as ctx:  # type: ignore[arg-type]
        ctx.decode(chunk, 0, logits="none")
        blob = ctx.state_get(0).copy()
        ref = ctx.decode(nxt, len(chunk), logits="all")
        payload = kv.encode(blob, "q8")
        buf = np.empty(kv.decoded_size(payload), dtype=np.uint8)
        ctx.clear()
        assert ctx.state_set(1, kv.decode(payload, buf)) == blob.nbytes
        assert ctx.pos_max(1) == len(chunk) - 1
        got = ctx.decode(nxt, len(chunk), seq_id=1, logits="all")
    assert float(kl_rows(ref, got).max()) < 0.05
    assert np.array_equal(ref.argmax(1), got.argmax(1))
