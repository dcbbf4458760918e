"""encode/decode: byte identity for 'none', bounded error per scheme, decoding into buffers."""

from __future__ import annotations

import numpy as np
import pytest

from cascade_cli import kv
from cascade_cli.errors import CodecError
from cascade_cli.kv.codec import TILED_K, Spec
from tests.kv.synth import make_blob

# Max error relative to each layer's largest |value|, per scheme (K, V).
BOUNDS = {"q8": (0.01, 0.01), "q4": (0.12, 0.15), "q2": (0.3, 0.6)}
RATIO = {"q8": 0.57, "q4": 0.32, "q2": 0.22}


def rel_errors(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    x, y = kv.parse(a), kv.parse(b)
    out = []
    for xs, ys in ((x.k, y.k), (x.v, y.v)):
        worst = 0.0
        for p, q in zip(xs, ys, strict=True):
            p32 = p.astype(np.float32)
            worst = max(worst, float(np.abs(p32 - q).max() / np.abs(p32).max()))
        out.append(worst)
    return out[0], out[1]


def test_none_is_byte_identical(real_blob: np.ndarray) -> None:
    payload = kv.encode(real_blob, "none")
    assert bytes(kv.decode(payload)) == bytes(real_blob)
    assert kv.decoded_size(payload) == real_blob.nbytes


@pytest.mark.parametrize("scheme", ["q8", "q4", "q2"])
def test_real_blob_error_bounds(real_blob: np.ndarray, scheme: str) -> None:
    payload = kv.encode(real_blob, scheme)
    out = kv.decode(payload)
    meta = len(kv.header(real_blob).meta)
    assert bytes(out[:meta]) == bytes(real_blob[:meta])
    ek, ev = rel_errors(real_blob, out)
    assert ek <= BOUNDS[scheme][0] and ev <= BOUNDS[scheme][1]


@pytest.mark.parametrize("scheme", ["q8", "q4", "q2"])
def test_size_ratio_on_block_multiples(scheme: str) -> None:
    blob = make_blob(512, n_layer=2, n_embd_k=192, n_embd_v=192)
    assert len(kv.encode(blob, scheme)) / blob.nbytes <= RATIO[scheme]


@pytest.mark.parametrize("n_cells", [1, 15, 37, 300])
@pytest.mark.parametrize("scheme", ["none", "q8", "q4", "q2"])
@pytest.mark.parametrize("v_trans", [True, False])
def test_odd_chunk_lengths(n_cells: int, scheme: str, v_trans: bool) -> None:
    blob = make_blob(n_cells, v_trans=v_trans, seed=n_cells)
    out = kv.decode(kv.encode(blob, scheme))
    assert out.nbytes == blob.nbytes
    if scheme == "none":
        assert bytes(out) == bytes(blob)
        return
    ek, ev = rel_errors(blob, out)
    assert ek <= BOUNDS[scheme][0] and ev <= BOUNDS[scheme][1]


@pytest.mark.parametrize("scheme", ["q8", "q4", "q2"])
def test_numpy_and_native_paths_agree(scheme: str) -> None:
    blob = make_blob(100, n_embd_k=192, n_embd_v=192)
    payload = kv.encode(blob, scheme)
    a = kv.decode(payload)
    b = kv.decode(payload, native_kernels=False)
    np.testing.assert_allclose(
        np.concatenate(kv.parse(a).k + kv.parse(a).v, axis=None).astype(np.float32),
        np.concatenate(kv.parse(b).k + kv.parse(b).v, axis=None).astype(np.float32),
        rtol=2e-3,
        atol=1e-4,
    )
    if scheme in ("q8", "q4"):  # ggml and numpy quantize these bit for bit
        assert kv.encode(blob, scheme, native_kernels=False) == payload
    ek, ev = rel_errors(blob, kv.decode(kv.encode(blob, scheme, native_kernels=False)))
    assert ek <= BOUNDS[scheme][0] and ev <= BOUNDS[scheme][1]


def test_decode_into_provided_buffer() -> None:
    blob = make_blob(40)
    payload = kv.encode(blob, "q8")
    buf = np.full(kv.decoded_size(payload) + 100, 7, dtype=np.uint8)
    out = kv.decode(payload, buf)
    assert np.shares_memory(out, buf) and out.nbytes == blob.nbytes
    assert out.ctypes.data == buf.ctypes.data
    assert np.all(buf[blob.nbytes :] == 7)
    assert bytes(out) == bytes(kv.decode(payload))
    with pytest.raises(CodecError, match="too small"):
        kv.decode(payload, np.empty(blob.nbytes - 1, dtype=np.uint8))


def test_payload_is_self_describing() -> None:
    blob = make_blob(20)
    info = kv.info(kv.encode(blob, "q4"))
    assert info.scheme_id == 2
    assert info.header.positions.tolist() == list(range(100, 120))
    assert info.header.n_layer == 2 and info.header.v_trans


def test_empty_blob_round_trips() -> None:
    blob = make_blob(0)
    for scheme in ("none", "q8", "q2"):
        assert bytes(kv.decode(kv.encode(blob, scheme))) == bytes(blob)


def test_bad_payloads_raise() -> None:
    payload = kv.encode(make_blob(20), "q4")
    with pytest.raises(CodecError, match="unknown KV scheme"):
        kv.encode(make_blob(4), "q3")
    with pytest.raises(CodecError, match="not a cascade"):
        kv.decode(b"XXXX" + payload[4:])
    with pytest.raises(CodecError):
        kv.decode(payload[:-1])
    with pytest.raises(CodecError, match="truncated"):
        kv.decode(payload[:10])


@pytest.mark.parametrize("n_cells", [1, 31, 32, 70, 512])
@pytest.mark.parametrize("v_trans", [False, True])
def test_tiled_keys_decode_like_the_untiled_layout(n_cells: int, v_trans: bool) -> None:
    """Tiling only reorders K's groups: tiled and untiled payloads (those written before the
    tiled layout existed) rebuild the same blob, and the tiled one is no larger."""
    blob = make_blob(n_cells, n_embd_k=192, n_embd_v=192, v_trans=v_trans)
    for spec in (kv.SCHEMES["q4"][1], kv.SCHEMES["q8"][1]):
        assert spec is not None and spec.flags & TILED_K
        untiled = Spec(spec.k_fmt, spec.v_fmt, spec.flags & ~TILED_K)
        new, old = kv.encode_spec(blob, spec, 2), kv.encode_spec(blob, untiled, 2)
        assert kv.info(new).flags & TILED_K and not kv.info(old).flags & TILED_K
        assert len(new) == len(old)
        assert bytes(kv.decode(new)) == bytes(kv.decode(old))
        assert bytes(kv.decode(new, native_kernels=False)) == bytes(kv.decode(new))


def test_versions_and_flags_are_checked() -> None:
    """Tiled payloads say version 2 (older readers refuse them); unknown flags are refused."""
    blob = make_blob(40)
    tiled = kv.encode(blob, "q4")
    assert tiled[4] == 2 and kv.info(tiled).flags & TILED_K
    assert kv.encode(blob, "q2")[4] == 1  # q3_K keys cannot be tiled: version 1 as before
    flags_at = 7  # magic(4) version scheme kfmt vfmt flags
    for bad in (tiled[:flags_at] + bytes([tiled[flags_at] | 0x40]) + tiled[flags_at + 1 :],
                tiled[:4] + bytes([1]) + tiled[5:],  # tiles claimed by a version-1 payload
                tiled[:4] + bytes([3]) + tiled[5:]):  # fmt: skip
        with pytest.raises(CodecError):
            kv.decode(bad)
