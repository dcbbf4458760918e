"""Synthetic blobs in llama.cpp's layout, for tests that need no model."""

from __future__ import annotations

import struct

import numpy as np

MAGIC = 0xAF143CD8


def make_blob(
    n_cells: int,
    n_layer: int = 2,
    n_embd_k: int = 128,
    n_embd_v: int = 128,
    v_trans: bool = True,
    seed: int = 0,
    n_stream: int = 1,
    k_type: int = 1,
) -> np.ndarray:
    """A blob with KV-like values: per-channel offsets (keys) and a few outlier channels."""
    rng = np.random.default_rng(seed)
    out = bytearray(struct.pack("<IiII", MAGIC, 0, n_stream, n_cells))
    for i in range(n_cells):
        out += struct.pack("<iIi", 100 + i, 1, 0)
    if n_cells == 0:
        return np.frombuffer(bytes(out), dtype=np.uint8).copy()
    out += struct.pack("<II", int(v_trans), n_layer)
    for _ in range(n_layer):
        k = rng.standard_normal((n_cells, n_embd_k)) + 3 * rng.standard_normal(n_embd_k)
        k[:, :2] *= 8
        out += struct.pack("<iQ", k_type, n_embd_k * 2) + k.astype(np.float16).tobytes()
    for _ in range(n_layer):
        v = rng.standard_normal((n_cells, n_embd_v)) * 0.1
        if v_trans:
            out += struct.pack("<iII", 1, 2, n_embd_v) + v.T.astype(np.float16).tobytes()
        else:
            out += struct.pack("<iQ", 1, n_embd_v * 2) + v.astype(np.float16).tobytes()
    return np.frombuffer(bytes(out), dtype=np.uint8).copy()
