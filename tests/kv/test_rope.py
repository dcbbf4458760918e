"""kv.rope: moving a chunk's keys ourselves matches llama.cpp's own K-shift."""

from __future__ import annotations

import numpy as np
import pytest

from cascade_cli import kv
from cascade_cli.errors import CodecError
from cascade_cli.kv.rope import Rope, rotation, shift_into, unrotate
from tests.kl import kl


@pytest.mark.parametrize("flash", ["off", "on"])
def test_shift_matches_llama_seq_add(model: object, tokens: list[int], flash: str) -> None:
    """Keys equal llama.cpp's own shift to f16 rounding; predictions as close to a direct
    computation at the new positions as llama.cpp's shift gets (this CPU build's floor)."""
    from cascade_cli.engine import Context

    chunk, nxt, delta = tokens[:80], tokens[80:84], 137
    at = 3 + delta + len(chunk)
    assert model.rope_exact  # type: ignore[attr-defined]
    rope = model.rope()  # type: ignore[attr-defined]
    with Context(model, 512, n_seq_max=2, flash_attn=flash) as ctx:  # type: ignore[arg-type]
        ctx.decode(chunk, 3 + delta, logits="none")
        direct = ctx.decode(nxt, at, logits="all")
        ctx.clear()
        ctx.decode(chunk, 3, seq_id=1, logits="none")
        blob = ctx.state_get(1).copy()
        ctx.clear()
        ctx.state_set(0, blob)
        ctx.seq_add(0, -1, -1, delta)  # llama.cpp's shift, applied on the next decode
        theirs = ctx.decode(nxt, at, logits="all")
        their_k = kv.parse(ctx.state_get(0)).k
        ctx.clear()
        moved = shift_into(blob, delta, rope, np.empty(blob.nbytes + 64, dtype=np.uint8))
        assert moved.nbytes == blob.nbytes
        assert np.array_equal(kv.header(moved).positions, kv.header(blob).positions + delta)
        ctx.state_set(0, moved)
        assert (ctx.pos_min(0), ctx.pos_max(0)) == (3 + delta, 2 + delta + len(chunk))
        ours = ctx.decode(nxt, at, logits="all")
    for k_ours, k_theirs in zip(kv.parse(moved).k, their_k, strict=True):
        a, b = k_ours.astype(np.float32), k_theirs[: len(chunk)].astype(np.float32)
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)  # one f16 ulp at most
        assert np.count_nonzero(a != b) < 0.02 * a.size
    floor = kl(direct, theirs)
    assert kl(direct, ours) < max(1e-3, 1.5 * floor)
    assert np.array_equal(theirs.argmax(1), ours.argmax(1))


def test_shift_leaves_source_and_values_alone(real_blob: np.ndarray) -> None:
    before = real_blob.copy()
    rope = Rope(base=100000.0, head_dim=64, n_head_kv=3, neox=False)
    moved = shift_into(real_blob, -5, rope, np.empty(real_blob.nbytes, dtype=np.uint8))
    assert np.array_equal(real_blob, before)
    a, b = kv.parse(real_blob), kv.parse(moved)
    for va, vb in zip(a.v, b.v, strict=True):
        assert np.array_equal(va, vb)
    back = shift_into(moved, 5, rope, np.empty(real_blob.nbytes, dtype=np.uint8))
    for ka, kb in zip(a.k, kv.parse(back).k, strict=True):
        np.testing.assert_allclose(
            kb.astype(np.float32), ka.astype(np.float32), atol=2e-2, rtol=2e-3
        )


@pytest.mark.parametrize("neox", [False, True])
def test_rotation_composes_and_unrotate_inverts(neox: bool) -> None:
    rope = Rope(base=10000.0, head_dim=8, n_head_kv=2, neox=neox, n_rot=6)
    np.testing.assert_allclose(rotation(rope, 3) @ rotation(rope, 4), rotation(rope, 7), atol=1e-6)
    np.testing.assert_allclose(rotation(rope, 0), np.eye(8), atol=0)
    m = rotation(rope, 9)
    assert np.array_equal(m[6:, 6:], np.eye(2, dtype=np.float32))  # past n_rot: untouched
    k = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float16)
    shifted = (k.astype(np.float32).reshape(-1, 8) @ m).reshape(1, 16).astype(np.float16)
    back = unrotate(shifted, np.array([9], dtype=np.int32), rope)
    np.testing.assert_allclose(back.reshape(1, 16), k.astype(np.float32), atol=5e-3)


@pytest.mark.parametrize("scheme", ["none", "q8", "q4", "q2"])
def test_decode_at_moves_like_shift_into(real_blob: np.ndarray, scheme: str) -> None:
    """Decoding straight to a new position equals decoding, then shifting (to f16 rounding)."""
    rope = Rope(base=100000.0, head_dim=64, n_head_kv=3, neox=False)
    payload = kv.encode(real_blob, scheme)
    plain = kv.decode(payload)
    pos0 = int(kv.header(plain).positions[0])
    moved = kv.decode(payload, at=pos0 + 300, rope=rope)
    ref = shift_into(plain, 300, rope, np.empty(plain.nbytes, dtype=np.uint8))
    assert np.array_equal(kv.header(moved).positions, kv.header(ref).positions)
    a, b = kv.parse(moved), kv.parse(ref)
    for x, y in zip(a.v, b.v, strict=True):
        assert np.array_equal(x, y)
    for x, y in zip(a.k, b.k, strict=True):
        # the reference rounds to f16 before rotating: a rotated pair carries up to about one
        # f16 ulp of its larger input (2^-10 of the layer's largest |k|) into small outputs
        tol = max(2e-3, 2**-10 * float(np.abs(y).max()))
        np.testing.assert_allclose(x.astype(np.float32), y.astype(np.float32), rtol=2e-3, atol=tol)
    assert bytes(kv.decode(payload, at=pos0, rope=None)) == bytes(plain)  # no move, no rope needed
    with pytest.raises(CodecError, match="RoPE"):
        kv.decode(payload, at=pos0 + 1)
