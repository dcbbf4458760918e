"""Numpy reference for the ggml block formats the codec uses (q8_0, q5_0, q4_0, q4_1, q2_K, q3_K).

Every function works on a flat float32 array whose length is a multiple of the format's block
size. Dequantization is bit-exact with ggml's (same block layouts). Quantization matches ggml's
reference for q8_0/q5_0/q4_0/q4_1; for q2_K/q3_K it is a simpler (min/max) quantizer writing the same
format — ggml's iterative search (used when the native kernels are available) is slightly better.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class Format:
    """One ggml block format: type id, values per block, bytes per block, sub-group size."""

    name: str
    ggml_type: int
    block: int
    nbytes: int
    group: int

    def size(self, n_values: int) -> int:
        """Bytes needed for n_values (a multiple of `block`)."""
        return n_values // self.block * self.nbytes


FORMATS: dict[str, Format] = {
    "q8_0": Format("q8_0", 8, 32, 34, 32),
    "q4_0": Format("q4_0", 2, 32, 18, 32),
    "q4_1": Format("q4_1", 3, 32, 20, 32),
    "q5_0": Format("q5_0", 6, 32, 22, 32),
    "q2_K": Format("q2_K", 10, 256, 84, 16),
    "q3_K": Format("q3_K", 11, 256, 110, 16),
}


def _f16(a: npt.NDArray[np.float32]) -> U8:
    """f32 (nb,) → its f16 bytes as (nb, 2)."""
    return a.astype(np.float16).view(np.uint8).reshape(-1, 2)


def _from_f16(b: U8) -> F32:
    """(nb, 2) f16 bytes → (nb,) float32."""
    return np.ascontiguousarray(b).view(np.float16).reshape(-1).astype(np.float32)


def _roundf(x: F32) -> F32:
    """C roundf: half away from zero."""
    return np.trunc(x + np.copysign(np.float32(0.5), x)).astype(np.float32)


def _inv(d: F32) -> F32:
    out = np.zeros_like(d)
    np.divide(np.float32(1.0), d, out=out, where=d != 0)
    return out


# -- q8_0 -------------------------------------------------------------------------------------
def quantize_q8_0(x: F32) -> U8:
    xb = x.reshape(-1, 32)
    d = (np.abs(xb).max(axis=1) / np.float32(127)).astype(np.float32)
    q = _roundf(xb * _inv(d)[:, None]).astype(np.int8)
    out = np.empty((xb.shape[0], 34), dtype=np.uint8)
    out[:, :2] = _f16(d)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(-1)


def dequantize_q8_0(data: U8) -> F32:
    b = data.reshape(-1, 34)
    d = _from_f16(b[:, :2])
    return (b[:, 2:].view(np.int8).astype(np.float32) * d[:, None]).reshape(-1)


# -- q4_0 / q4_1 ------------------------------------------------------------------------------
def _pack_nibbles(q: npt.NDArray[np.uint8]) -> U8:
    return (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)


def _unpack_nibbles(qs: U8) -> U8:
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def quantize_q4_0(x: F32) -> U8:
    xb = x.reshape(-1, 32)
    idx = np.abs(xb).argmax(axis=1)
    mx = xb[np.arange(xb.shape[0]), idx]
    d = (mx / np.float32(-8)).astype(np.float32)
    v = xb * _inv(d)[:, None] + np.float32(8.5)
    q = np.minimum(np.trunc(v), 15).astype(np.uint8)
    out = np.empty((xb.shape[0], 18), dtype=np.uint8)
    out[:, :2] = _f16(d)
    out[:, 2:] = _pack_nibbles(q)
    return out.reshape(-1)


def dequantize_q4_0(data: U8) -> F32:
    b = data.reshape(-1, 18)
    d = _from_f16(b[:, :2])
    q = _unpack_nibbles(b[:, 2:]).astype(np.float32) - np.float32(8)
    return (q * d[:, None]).reshape(-1)


def quantize_q4_1(x: F32) -> U8:
    xb = x.reshape(-1, 32)
    lo = xb.min(axis=1)
    d = ((xb.max(axis=1) - lo) / np.float32(15)).astype(np.float32)
    v = (xb - lo[:, None]) * _inv(d)[:, None] + np.float32(0.5)
    q = np.minimum(np.trunc(v), 15).astype(np.uint8)
    out = np.empty((xb.shape[0], 20), dtype=np.uint8)
    out[:, :2] = _f16(d)
    out[:, 2:4] = _f16(lo)
    out[:, 4:] = _pack_nibbles(q)
    return out.reshape(-1)


def dequantize_q4_1(data: U8) -> F32:
    b = data.reshape(-1, 20)
    d = _from_f16(b[:, :2])
    m = _from_f16(b[:, 2:4])
    q = _unpack_nibbles(b[:, 4:]).astype(np.float32)
    return (q * d[:, None] + m[:, None]).reshape(-1)


def quantize_q5_0(x: F32) -> U8:
    xb = x.reshape(-1, 32)
    idx = np.abs(xb).argmax(axis=1)
    mx = xb[np.arange(xb.shape[0]), idx]
    d = (mx / np.float32(-16)).astype(np.float32)
    v = xb * _inv(d)[:, None] + np.float32(16.5)
    q = np.minimum(np.trunc(v), 31).astype(np.uint32)
    hbits = ((q >> 4) & 1) << np.arange(32, dtype=np.uint32)
    qh = np.bitwise_or.reduce(hbits, axis=1).astype("<u4")
    out = np.empty((xb.shape[0], 22), dtype=np.uint8)
    out[:, :2] = _f16(d)
    out[:, 2:6] = qh.view(np.uint8).reshape(-1, 4)
    out[:, 6:] = _pack_nibbles((q & 0x0F).astype(np.uint8))
    return out.reshape(-1)


def dequantize_q5_0(data: U8) -> F32:
    b = data.reshape(-1, 22)
    d = _from_f16(b[:, :2])
    qh = np.ascontiguousarray(b[:, 2:6]).view("<u4")
    hb = (qh >> np.arange(32, dtype=np.uint32)) & 1
    q = (_unpack_nibbles(b[:, 6:]) | (hb << 4)).astype(np.float32) - np.float32(16)
    return (q * d[:, None]).reshape(-1)


# -- 2-bit planes shared by q2_K / q3_K --------------------------------------------------------
def _pack_2bit(q: npt.NDArray[np.uint8]) -> U8:
    """(nb, 256) values 0..3 → (nb, 64) bytes in ggml's k-quant order."""
    p = q.reshape(-1, 2, 4, 32)
    out = p[:, :, 0] | (p[:, :, 1] << 2) | (p[:, :, 2] << 4) | (p[:, :, 3] << 6)
    return np.asarray(out, dtype=np.uint8).reshape(-1, 64)


def _unpack_2bit(qs: U8) -> U8:
    p = qs.reshape(-1, 2, 1, 32)
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    return np.asarray((p >> shifts) & 3, dtype=np.uint8).reshape(-1, 256)


# -- q2_K --------------------------------------------------------------------------------------
def quantize_q2_K(x: F32) -> U8:
    xb = x.reshape(-1, 16, 16)
    nb = xb.shape[0]
    mins = -np.minimum(xb.min(axis=2), 0)
    scales = (xb.max(axis=2) + mins) / np.float32(3)
    d = (scales.max(axis=1) / np.float32(15)).astype(np.float32)
    dmin = (mins.max(axis=1) / np.float32(15)).astype(np.float32)
    d16, dmin16 = _from_f16(_f16(d)), _from_f16(_f16(dmin))
    ls = np.clip(np.ceil(scales * _inv(d16)[:, None] - np.float32(0.01)), 0, 15)
    lm = np.clip(np.rint(mins * _inv(dmin16)[:, None]), 0, 15)
    dl = (d16[:, None] * ls).astype(np.float32)
    ml = (dmin16[:, None] * lm).astype(np.float32)
    q = np.clip(np.rint((xb + ml[:, :, None]) * _inv(dl)[:, :, None]), 0, 3).astype(np.uint8)
    out = np.empty((nb, 84), dtype=np.uint8)
    out[:, :16] = ls.astype(np.uint8) | (lm.astype(np.uint8) << 4)
    out[:, 16:80] = _pack_2bit(q.reshape(nb, 256))
    out[:, 80:82] = _f16(d)
    out[:, 82:84] = _f16(dmin)
    return out.reshape(-1)


def dequantize_q2_K(data: U8) -> F32:
    b = data.reshape(-1, 84)
    nb = b.shape[0]
    d = _from_f16(b[:, 80:82])
    dmin = _from_f16(b[:, 82:84])
    sc = b[:, :16]
    dl = (d[:, None] * (sc & 0x0F).astype(np.float32)).astype(np.float32)
    ml = (dmin[:, None] * (sc >> 4).astype(np.float32)).astype(np.float32)
    q = _unpack_2bit(b[:, 16:80]).reshape(nb, 16, 16).astype(np.float32)
    return (dl[:, :, None] * q - ml[:, :, None]).reshape(-1)


# -- q3_K --------------------------------------------------------------------------------------
def _pack_q3_scales(ls: npt.NDArray[np.uint8]) -> U8:
    """(nb, 16) 6-bit scales → (nb, 12) bytes (ggml's q3_K packing)."""
    out = np.empty((ls.shape[0], 12), dtype=np.uint8)
    out[:, :8] = (ls[:, :8] & 0x0F) | ((ls[:, 8:] & 0x0F) << 4)
    hi = ls >> 4
    out[:, 8:] = hi[:, 0:4] | (hi[:, 4:8] << 2) | (hi[:, 8:12] << 4) | (hi[:, 12:16] << 6)
    return out


def _unpack_q3_scales(s: U8) -> npt.NDArray[np.int32]:
    lo = np.concatenate([s[:, :8] & 0x0F, s[:, :8] >> 4], axis=1)
    t = s[:, 8:12]
    hi = np.concatenate([t & 3, (t >> 2) & 3, (t >> 4) & 3, (t >> 6) & 3], axis=1)
    return np.asarray(lo | (hi << 4), dtype=np.int32) - 32


def quantize_q3_K(x: F32) -> U8:
    xb = x.reshape(-1, 16, 16)
    nb = xb.shape[0]
    idx = np.abs(xb).argmax(axis=2)
    mx = np.take_along_axis(xb, idx[:, :, None], axis=2)[:, :, 0]
    scales = (mx / np.float32(-4)).astype(np.float32)
    big = np.take_along_axis(scales, np.abs(scales).argmax(axis=1)[:, None], axis=1)[:, 0]
    iscale = (np.float32(-32) * _inv(big)).astype(np.float32)
    d = _inv(iscale)
    ls = np.clip(np.rint(iscale[:, None] * scales), -32, 31)
    dl = (_from_f16(_f16(d))[:, None] * ls).astype(np.float32)
    q = np.clip(np.rint(xb * _inv(dl)[:, :, None]), -4, 3).astype(np.int8) + 4
    qu = q.astype(np.uint8).reshape(nb, 256)
    hb = (qu >> 2).reshape(nb, 8, 32)
    hmask = np.zeros((nb, 32), dtype=np.uint8)
    for bit in range(8):
        hmask |= hb[:, bit] << bit
    out = np.empty((nb, 110), dtype=np.uint8)
    out[:, :32] = hmask
    out[:, 32:96] = _pack_2bit(qu & 3)
    out[:, 96:108] = _pack_q3_scales((ls + 32).astype(np.uint8))
    out[:, 108:110] = _f16(d)
    return out.reshape(-1)


def dequantize_q3_K(data: U8) -> F32:
    b = data.reshape(-1, 110)
    nb = b.shape[0]
    d = _from_f16(b[:, 108:110])
    dl = (d[:, None] * _unpack_q3_scales(b[:, 96:108]).astype(np.float32)).astype(np.float32)
    low = _unpack_2bit(b[:, 32:96]).astype(np.int8)
    bits = np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
    hb = ((b[:, None, :32] >> bits) & 1).reshape(nb, 256).astype(np.int8)
    q = (low - 4 * (1 - hb)).reshape(nb, 16, 16).astype(np.float32)
    return (dl[:, :, None] * q).reshape(-1)


QUANTIZE = {
    "q8_0": quantize_q8_0,
    "q4_0": quantize_q4_0,
    "q4_1": quantize_q4_1,
    "q5_0": quantize_q5_0,
    "q2_K": quantize_q2_K,
    "q3_K": quantize_q3_K,
}
DEQUANTIZE = {
    "q8_0": dequantize_q8_0,
    "q4_0": dequantize_q4_0,
    "q4_1": dequantize_q4_1,
    "q5_0": dequantize_q5_0,
    "q2_K": dequantize_q2_K,
    "q3_K": dequantize_q3_K,
}


def quantize(fmt: str, x: F32) -> U8:
    """Quantize a flat f32 array (length a multiple of the block size)."""
    return QUANTIZE[fmt](np.ascontiguousarray(x, dtype=np.float32).reshape(-1))


def dequantize(fmt: str, data: U8) -> F32:
    """Dequantize a flat uint8 block array to float32."""
    return DEQUANTIZE[fmt](data)
