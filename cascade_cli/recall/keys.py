"""Key-based recall (the InfLLM idea): score chunks by how their keys resemble the question's.

At ingest each chunk keeps a summary: per selected layer and KV head, the mean of its keys with
RoPE undone (so keys saved at different positions compare). At ask time the question is decoded
alone in a scratch sequence, its keys summarised the same way, and chunks ranked by the mean
cosine between centred summaries (the document's mean summary is subtracted first, because raw
keys share a large common direction).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from cascade_cli.kv import blob as kvblob

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Rope:
    """What is needed to undo RoPE on stored keys."""

    base: float
    head_dim: int
    n_head_kv: int
    neox: bool  # rotate halves (NEOX) instead of adjacent pairs (NORM)


def layers_for(n_layer: int) -> list[int]:
    """Summarised layers: a spread over the upper two thirds of the stack."""
    start = n_layer // 3
    picks = np.linspace(start, n_layer - 1, num=min(6, n_layer - start)).round().astype(int)
    return sorted(set(int(p) for p in picks))


def unrotate(k: npt.NDArray[np.float16], positions: npt.NDArray[np.int32], rope: Rope) -> F32:
    """Undo RoPE: rotate every key back by its position's angle. k is (n, n_head_kv*head_dim)."""
    n = k.shape[0]
    hd = rope.head_dim
    x = k.astype(np.float32).reshape(n, rope.n_head_kv, hd)
    half = hd // 2
    theta = rope.base ** (-np.arange(half, dtype=np.float64) * 2.0 / hd)
    ang = positions.astype(np.float64)[:, None] * theta[None, :]
    cos = np.cos(ang).astype(np.float32)[:, None, :]
    sin = np.sin(ang).astype(np.float32)[:, None, :]
    if rope.neox:
        a, b = x[..., :half], x[..., half:]
        out = np.concatenate([a * cos + b * sin, b * cos - a * sin], axis=-1)
    else:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos + b * sin
        out[..., 1::2] = b * cos - a * sin
    return out


def summarize(blob: kvblob.BlobLike, rope: Rope) -> bytes:
    """A chunk's (or question's) summary: mean unrotated key per selected layer and head, f16."""
    parsed = kvblob.parse(blob)
    pos = parsed.header.positions
    rows = [
        unrotate(parsed.k[layer], pos, rope).mean(axis=0) for layer in layers_for(len(parsed.k))
    ]
    return np.stack(rows).astype(np.float16).tobytes()


def rank(
    question: bytes, chunks: list[tuple[int, bytes]], head_dim: int
) -> list[tuple[int, float]]:
    """(chunk index, score) best first, by mean cosine of centred summaries."""
    if not chunks:
        return []
    q = np.frombuffer(question, dtype=np.float16).astype(np.float32)
    mat = np.stack([np.frombuffer(s, dtype=np.float16).astype(np.float32) for _, s in chunks])
    centre = mat.mean(axis=0)
    qc = (q - centre).reshape(-1, head_dim)
    mc = (mat - centre).reshape(len(chunks), -1, head_dim)
    qn = qc / (np.linalg.norm(qc, axis=-1, keepdims=True) + 1e-6)
    mn = mc / (np.linalg.norm(mc, axis=-1, keepdims=True) + 1e-6)
    scores = (mn * qn[None]).sum(axis=-1).mean(axis=-1)
    order = np.argsort(-scores)
    return [(chunks[i][0], float(scores[i])) for i in order]
