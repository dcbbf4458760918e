"""A chunk saved with one V layout decodes into the other (flash attention on vs off)."""

from __future__ import annotations

import numpy as np
import pytest

from cascade_cli import kv


@pytest.mark.parametrize("scheme", ["none", "q8", "q4"])
def test_decode_converts_the_v_layout(real_blob: np.ndarray, scheme: str) -> None:
    saved = kv.parse(real_blob)
    payload = kv.encode(real_blob, scheme)
    same = kv.parse(kv.decode(payload))
    flipped_bytes = kv.decode(payload, v_trans=not saved.header.v_trans)
    flipped = kv.parse(flipped_bytes)
    assert flipped.header.v_trans is not saved.header.v_trans
    assert len(flipped_bytes) == len(real_blob)
    assert np.array_equal(flipped.header.positions, saved.header.positions)
    for layer in range(saved.header.n_layer):
        assert np.array_equal(flipped.k[layer], same.k[layer])
        assert np.array_equal(flipped.v_rows(layer), same.v_rows(layer))
    again = kv.decode(payload, v_trans=saved.header.v_trans)
    assert bytes(again) == bytes(kv.decode(payload))


def test_a_converted_chunk_restores_into_the_other_layout(model: object, tokens: list[int]) -> None:
    """Saved with flash attention off, restored into a context with it on: the next token's
    logits match those of a context that decoded the same tokens itself."""
    from cascade_cli.engine import Context

    toks = tokens[:64]
    with Context(model, 256, n_seq_max=2, flash_attn="off") as off:  # type: ignore[arg-type]
        off.decode(toks, 0, 0, logits="none")
        payload = kv.encode(off.state_get(0), "none")
    with Context(model, 256, n_seq_max=2, flash_attn="on") as on:  # type: ignore[arg-type]
        on.decode(toks, 0, 0, logits="none")
        want = on.decode([toks[0]], len(toks), 0, logits="last")
        on.seq_rm(0)
        on.state_set(0, kv.decode(payload, v_trans=False))
        got = on.decode([toks[0]], len(toks), 0, logits="last")
    assert int(np.argmax(got)) == int(np.argmax(want))
    assert float(np.abs(got - want).max()) < 0.05 * float(np.abs(want).max())
