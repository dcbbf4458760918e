"""Block formats: ggml kernels agree with the numpy reference; error stays within bounds."""

from __future__ import annotations

import numpy as np
import pytest

from cascade_cli.kv import native, quant

FMTS = list(quant.FORMATS)
# Max error relative to the block's largest magnitude, per format (loose upper bounds).
BOUNDS = {"q8_0": 0.005, "q4_0": 0.13, "q4_1": 0.07, "q5_0": 0.065, "q2_K": 0.4, "q3_K": 0.2}


def data(n: int = 256 * 64, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * rng.exponential(1.0, n)
    x[::97] += 4.0
    return x.astype(np.float32)


def test_kernels_loaded() -> None:
    assert native.available()


@pytest.mark.parametrize("fmt", FMTS)
def test_native_dequantize_matches_numpy(fmt: str) -> None:
    q = native.quantize(fmt, data())
    np.testing.assert_allclose(
        native.dequantize(fmt, q), native.dequantize(fmt, q, native=False), rtol=1e-6, atol=1e-6
    )


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_1", "q5_0"])
def test_native_quantize_matches_numpy_bit_for_bit(fmt: str) -> None:
    x = data()
    assert np.array_equal(native.quantize(fmt, x), native.quantize(fmt, x, native=False))


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("use_native", [True, False])
def test_error_bounds(fmt: str, use_native: bool) -> None:
    f = quant.FORMATS[fmt]
    x = data()
    q = native.quantize(fmt, x, native=use_native)
    assert q.size == f.size(x.size)
    y = native.dequantize(fmt, q, native=use_native)
    err = np.abs(y - x).reshape(-1, f.group).max(axis=1)
    scale = np.abs(x).reshape(-1, f.block).max(axis=1).repeat(f.block // f.group)
    assert float((err / scale).max()) <= BOUNDS[fmt]


@pytest.mark.parametrize("fmt", FMTS)
def test_constant_and_zero_blocks_are_exact(fmt: str) -> None:
    x = np.zeros(256, dtype=np.float32)
    for use_native in (True, False):
        y = native.dequantize(fmt, native.quantize(fmt, x, native=use_native), native=use_native)
        assert np.array_equal(y, x)


def test_numpy_q2_quantizer_is_close_to_ggml() -> None:
    x = data()
    ref = np.sqrt(np.mean((native.dequantize("q2_K", native.quantize("q2_K", x)) - x) ** 2))
    got = native.dequantize("q2_K", native.quantize("q2_K", x, native=False))
    assert np.sqrt(np.mean((got - x) ** 2)) <= 1.25 * ref


def test_f16_conversions_match_numpy() -> None:
    x = data(1000)
    dst = np.empty(1000, dtype=np.float16)
    native.to_f16(x, dst)
    assert np.array_equal(dst, x.astype(np.float16))
    assert np.array_equal(native.to_f32(dst), dst.astype(np.float32))


def test_configure_none_falls_back_to_numpy() -> None:
    from cascade_cli.engine import library_dir

    x = data(256)
    want = native.quantize("q4_0", x)
    try:
        assert not native.configure(None)
        assert not native.available()
        assert np.array_equal(native.quantize("q4_0", x), want)
        assert not native.configure("/nonexistent/dir")
    finally:
        assert native.configure(library_dir())
