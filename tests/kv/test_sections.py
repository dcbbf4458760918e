"""Several-section state blobs (kv.sections) on a real sliding-window model (Gemma 3 270M)."""

from __future__ import annotations

import numpy as np
import pytest

from cascade_cli import kv
from cascade_cli.errors import CodecError
from cascade_cli.kv import sections
from cascade_cli.samples import PERSUASION
from tests.kl import kl_rows


@pytest.fixture(scope="module")
def gemma_tokens(gemma: object) -> list[int]:
    text = PERSUASION.read_text()
    text = text[text.find("Sir Walter Elliot") :]
    return gemma.tokenize(text)[:400]  # type: ignore[attr-defined]


def _chunk_state(gemma: object, toks: list[int], flash: str) -> tuple[np.ndarray, np.ndarray]:
    """(state of tokens [100, 300) decoded after [0, 100), logits of the next 8 tokens)."""
    from cascade_cli.engine import Context

    with Context(gemma, 1024, n_seq_max=2, flash_attn=flash) as ctx:  # type: ignore[arg-type]
        ctx.decode(toks[:300], 0, logits="none")
        ctx.seq_cp(0, 1, 100, 300)
        blob = ctx.state_get(1).copy()
        ref = ctx.decode(toks[300:308], 300, logits="all")
    return blob, ref


@pytest.mark.parametrize("flash", ["off", "on"])
def test_iswa_blob_has_a_base_and_a_swa_section(
    gemma: object, gemma_tokens: list[int], flash: str
) -> None:
    assert gemma.cache_layout == "iswa"  # type: ignore[attr-defined]
    blob, _ = _chunk_state(gemma, gemma_tokens, flash)
    with pytest.raises(CodecError, match="bytes after its 1 kv section"):
        sections.split(blob, "kv")  # the old one-cache reading of this blob
    base, swa = sections.split(blob, "iswa")
    hb, hs = kv.header(base), kv.header(swa)
    assert (hb.n_layer, hs.n_layer) == (3, 15)  # Gemma 3: one global layer in six
    assert hb.n_cells == hs.n_cells == 200  # 200 < n_swa: the SWA section holds every cell
    assert int(hb.positions.min()) == 100 and int(hs.positions.max()) == 299
    assert np.array_equal(sections.join([base, swa]), blob)


def _restored(gemma: object, toks: list[int], scheme: str) -> tuple[np.ndarray, ...]:
    """(state of 300 tokens, its payload, the next 8 tokens' logits, the same logits after the
    payload was decoded and restored into a cleared context)."""
    from cascade_cli.engine import Context

    with Context(gemma, 1024, n_seq_max=2, flash_attn="off") as ctx:  # type: ignore[arg-type]
        ctx.decode(toks[:300], 0, logits="none")
        blob = ctx.state_get(0).copy()
        ref = ctx.decode(toks[300:308], 300, logits="all")
        payload = np.frombuffer(kv.encode(blob, scheme, layout="iswa"), dtype=np.uint8)
        ctx.clear()
        assert ctx.state_set(1, kv.decode(payload)) == blob.nbytes
        got = ctx.decode(toks[300:308], 300, seq_id=1, logits="all")
    return blob, payload, ref, got


def test_iswa_verbatim_round_trip_restores_exact_logits(
    gemma: object, gemma_tokens: list[int]
) -> None:
    blob, payload, ref, got = _restored(gemma, gemma_tokens, "none")
    assert kv.layout_of(payload) == "iswa"
    assert np.array_equal(kv.decode(payload), blob)
    assert kv.decoded_size(payload) == blob.nbytes
    assert np.array_equal(ref, got)


@pytest.mark.parametrize(("scheme", "limit", "ratio"), [("q8", 0.01, 0.6), ("q4", 0.05, 0.35)])
def test_iswa_quantized_restore_predicts_like_the_original(
    gemma: object, gemma_tokens: list[int], scheme: str, limit: float, ratio: float
) -> None:
    blob, payload, ref, got = _restored(gemma, gemma_tokens, scheme)
    assert payload.nbytes < blob.nbytes * ratio
    assert float(kl_rows(ref, got).mean()) < limit
    assert (ref.argmax(1) == got.argmax(1)).mean() >= 0.75


def test_iswa_payload_moved_on_decode_keeps_both_sections(
    gemma: object, gemma_tokens: list[int]
) -> None:
    blob, _ = _chunk_state(gemma, gemma_tokens, "off")
    payload = kv.encode(blob, "q8", layout="iswa")
    rope = gemma.rope()  # type: ignore[attr-defined]
    moved = kv.decode(payload, at=40, rope=rope)
    base, swa = sections.split(moved, "iswa")
    assert int(kv.header(base).positions.min()) == 40
    assert int(kv.header(swa).positions.min()) == 40


def test_sectioned_payload_damage_is_refused() -> None:
    with pytest.raises(CodecError):
        sections.unpack(sections.pack("iswa", [b"x" * 10, b"y" * 5])[:-1])
    with pytest.raises(CodecError, match="unknown layout"):
        sections.unpack(b"CKVS\x01\x07\x02\x00" + bytes(16))
    with pytest.raises(CodecError, match="unknown KV layout"):
        kv.encode(b"", "q8", layout="mamba")


def _recurrent_section(n_layer: int = 3, rows: int = 40, seed: int = 0) -> bytes:
    """A recurrent section as llama_memory_recurrent writes it for one sequence: one cell (its
    last position, no sequence ids), s_trans 0, then R and S rows per layer (f32)."""
    import struct

    rng = np.random.default_rng(seed)
    out = [struct.pack("<IiI", 1, 299, 0), struct.pack("<II", 0, n_layer)]
    for _ in range(2 * n_layer):  # R rows, then S rows
        out.append(
            struct.pack("<iQ", 0, rows * 4) + rng.standard_normal(rows, np.float32).tobytes()
        )
    return b"".join(out)


def test_hybrid_and_recurrent_sections_travel_verbatim(real_blob: np.ndarray) -> None:
    rs = _recurrent_section()
    hybrid = np.concatenate([real_blob, np.frombuffer(rs, dtype=np.uint8)])
    attn, rec = sections.split(hybrid, "hybrid")
    assert np.array_equal(attn, real_blob) and bytes(rec[8:]) == rs
    for scheme in ("none", "q8", "q4"):
        payload = kv.encode(hybrid, scheme, layout="hybrid")
        assert kv.layout_of(payload) == "hybrid"
        back = kv.decode(payload)
        assert bytes(sections.split(back, "hybrid")[1][8:]) == rs  # recurrent state exact
        assert kv.decoded_size(payload) == hybrid.nbytes
    with pytest.raises(CodecError, match="cannot be moved"):
        kv.decode(kv.encode(hybrid, "q8", layout="hybrid"), at=10, rope=None)
    recurrent = np.concatenate([real_blob[:8], np.frombuffer(rs, dtype=np.uint8)])
    payload = kv.encode(recurrent, "q4", layout="recurrent")
    assert np.array_equal(kv.decode(payload), recurrent)
