"""RoPE on stored keys: undo it (for key summaries) or move keys to new positions (shift).

Moving a chunk by Δ positions multiplies each rotated channel pair by the rotation of angle
Δ·θᵢ, θᵢ = freq_scale · base^(−2i/n_rot) — the same rotation llama.cpp's K-shift applies. Doing
it here, while a chunk is copied for restoring, costs a (tokens·heads, 64) × (64, 64) product per
layer; llama.cpp's own shift re-ropes every cell of the whole cache on the next decode (measured:
≈ 37 ms for a 4,864-cell cache of the default model on 2 cores, for any chunk size).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from cascade_cli.errors import CodecError
from cascade_cli.kv import blob as kvblob
from cascade_cli.kv import native
from cascade_cli.kv.pool import pmap

F32 = npt.NDArray[np.float32]
F16 = npt.NDArray[np.float16]
U8 = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class Rope:
    """A model's rotary embedding, as far as stored keys are concerned."""

    base: float
    head_dim: int
    n_head_kv: int
    neox: bool  # rotate halves (NEOX) instead of adjacent pairs (NORM)
    n_rot: int = 0  # rotated dimensions per head (0 = head_dim)
    freq_scale: float = 1.0

    @property
    def dims(self) -> int:
        return self.n_rot or self.head_dim

    def theta(self) -> npt.NDArray[np.float64]:
        half = self.dims // 2
        return self.freq_scale * self.base ** (-np.arange(half, dtype=np.float64) * 2.0 / self.dims)

    def pairs(self) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        """Channel indices (within a head) of each rotated pair's first and second element."""
        half = self.dims // 2
        idx = np.arange(half)
        return (idx, idx + half) if self.neox else (2 * idx, 2 * idx + 1)


def unrotate(k: F16, positions: npt.NDArray[np.int32], rope: Rope) -> F32:
    """Undo RoPE: rotate every key back by its position's angle. k is (n, n_head_kv*head_dim)."""
    n = k.shape[0]
    x = k.astype(np.float32).reshape(n, rope.n_head_kv, rope.head_dim)
    ang = positions.astype(np.float64)[:, None] * rope.theta()[None, :]
    cos = np.cos(ang).astype(np.float32)[:, None, :]
    sin = np.sin(ang).astype(np.float32)[:, None, :]
    a_i, b_i = rope.pairs()
    a, b = x[..., a_i], x[..., b_i]
    out = x.copy()
    out[..., a_i] = a * cos + b * sin
    out[..., b_i] = b * cos - a * sin
    return out


def rotation(rope: Rope, delta: int) -> F32:
    """(head_dim, head_dim) matrix M with k_shifted = k @ M for one head's key row."""
    m = np.eye(rope.head_dim, dtype=np.float64)
    ang = delta * rope.theta()
    cos, sin = np.cos(ang), np.sin(ang)
    a_i, b_i = rope.pairs()
    m[a_i, a_i] = cos
    m[b_i, b_i] = cos
    m[a_i, b_i] = sin  # b' = a·sin + b·cos
    m[b_i, a_i] = -sin  # a' = a·cos − b·sin
    return m.astype(np.float32)


@dataclass(frozen=True)
class Move:
    """A RoPE shift of keys by a fixed number of positions."""

    matrix: F32  # k_row_of_one_head @ matrix
    head_dim: int

    @classmethod
    def of(cls, rope: Rope, delta: int) -> Move:
        return cls(rotation(rope, delta), rope.head_dim)

    def apply(self, k: F32) -> F32:
        """(n, n_embd_k) f32 keys, moved."""
        return (k.reshape(-1, self.head_dim) @ self.matrix).reshape(k.shape)

    def apply_f16(self, k: F16, out: F16, nat: bool = True) -> None:
        """out[...] = k moved (f16 in and out; `out` may be `k`)."""
        native.to_f16(self.apply(native.to_f32(k, nat)), out, nat)


def shift_into(
    blob: kvblob.BlobLike, delta: int, rope: Rope, out: U8, native_kernels: bool = True
) -> U8:
    """Copy a state blob into `out` with every cell moved by `delta` positions (keys re-roped).

    Returns the filled view of `out`; the source is not modified.
    """
    src = kvblob.parse(blob)
    size = kvblob.blob_size(src.header)
    if out.nbytes < size:
        raise CodecError(f"output buffer too small: {out.nbytes} < {size}")
    hdr = src.header
    dst = out[:size]
    if hdr.n_embd_k != rope.n_head_kv * rope.head_dim:
        raise CodecError(f"K rows of {hdr.n_embd_k} values do not match {rope}")
    ks, vs = kvblob.layout(hdr, dst)  # header, positions still the old ones
    kvblob.add_positions(dst, delta)
    move = Move.of(rope, delta)

    def copy(i: int) -> None:
        if i >= hdr.n_layer:
            vs[i - hdr.n_layer][...] = src.v[i - hdr.n_layer]
        else:
            move.apply_f16(src.k[i], ks[i], native_kernels)

    pmap(copy, 2 * hdr.n_layer)
    return dst
