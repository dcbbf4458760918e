"""Blob parsing: byte-identical round trips, cheap headers, clear errors on unsupported layouts."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from cascade_cli import kv
from cascade_cli.errors import CodecError
from tests.kv.synth import make_blob


def test_real_blob_round_trips_byte_identically(real_blob: np.ndarray) -> None:
    parsed = kv.parse(real_blob)
    assert parsed.header.n_cells == 70
    assert parsed.header.n_layer == 30
    assert (parsed.header.n_embd_k, parsed.header.n_embd_v) == (192, 192)
    assert parsed.header.positions.tolist() == list(range(5, 75))
    assert parsed.header.cell_seqs[0] == (1,)
    assert parsed.header.seq_id == 1
    assert np.shares_memory(parsed.k[0], real_blob)
    assert bytes(kv.serialize(parsed)) == bytes(real_blob)


def test_both_v_layouts_hold_the_same_values(model: object, tokens: list[int]) -> None:
    from cascade_cli.engine import Context

    blobs = []
    for flash in ("off", "on"):
        with Context(model, 128, n_seq_max=1, flash_attn=flash) as ctx:  # type: ignore[arg-type]
            ctx.decode(tokens[:20], 0, logits="none")
            blobs.append(kv.parse(ctx.state_get(0).copy()))
    off, on = blobs
    assert off.header.v_trans and not on.header.v_trans
    assert off.v[3].shape == (192, 20) and on.v[3].shape == (20, 192)
    # Layer 0 sees only embeddings, so both layouts must hold the same V there.
    assert np.array_equal(off.v_rows(0), on.v_rows(0))


def test_header_matches_parse(real_blob: np.ndarray) -> None:
    h = kv.header(real_blob)
    full = kv.parse(real_blob).header
    assert h.positions.tolist() == full.positions.tolist()
    assert (h.n_layer, h.n_embd_k, h.n_embd_v, h.v_trans) == (
        full.n_layer,
        full.n_embd_k,
        full.n_embd_v,
        full.v_trans,
    )
    assert kv.blob_size(h) == real_blob.nbytes


@pytest.mark.parametrize("v_trans", [True, False])
def test_synthetic_round_trip_from_bytes(v_trans: bool) -> None:
    blob = make_blob(37, v_trans=v_trans)
    assert bytes(kv.serialize(kv.parse(bytes(blob)))) == bytes(blob)


def test_empty_blob() -> None:
    blob = make_blob(0)
    parsed = kv.parse(blob)
    assert parsed.header.n_cells == 0 and parsed.k == ()
    assert bytes(kv.serialize(parsed)) == bytes(blob)


def test_multi_sequence_cells_round_trip() -> None:
    blob = bytearray(make_blob(3))
    cells = bytearray()
    for i, seqs in enumerate([(0,), (0, 2), ()]):
        cells += struct.pack(f"<iI{len(seqs)}i", i, len(seqs), *seqs)
    blob = blob[:16] + cells + blob[16 + 36 :]
    parsed = kv.parse(bytes(blob))
    assert parsed.header.cell_seqs == ((0,), (0, 2), ())
    assert bytes(kv.serialize(parsed)) == bytes(blob)


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"\x00" * 16, "magic"),
        (bytes(make_blob(4, n_stream=2)), "streams"),
        (bytes(make_blob(4, k_type=8)), "K type"),
        (bytes(make_blob(4))[:-3], "truncated"),
        (bytes(make_blob(4)) + b"\x00", "trailing"),
        (b"\xd8\x3c", "truncated"),
    ],
)
def test_unsupported_layouts_raise(blob: bytes, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        kv.parse(blob)


def test_non_f16_value_type_raises() -> None:
    blob = bytearray(make_blob(4, n_layer=1, v_trans=False))
    v_at = 16 + 4 * 12 + 8 + 12 + 4 * 128 * 2
    struct.pack_into("<i", blob, v_at, 0)
    with pytest.raises(CodecError, match="V type"):
        kv.parse(bytes(blob))
