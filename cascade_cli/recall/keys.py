"""Key-based recall (the InfLLM idea): score chunks by how their keys resemble the question's.

At ingest each chunk keeps a summary: per selected layer and KV head, the mean of its keys with
RoPE undone (so keys saved at different positions compare). At ask time the question is decoded
alone in a scratch sequence, its keys summarised the same way, and chunks ranked by the mean
cosine between centred summaries (the document's mean summary is subtracted first, because raw
keys share a large common direction).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from cascade_cli.kv import blob as kvblob
from cascade_cli.kv.rope import Rope, unrotate

F32 = npt.NDArray[np.float32]


def layers_for(n_layer: int) -> list[int]:
    """Summarised layers: a spread over the upper two thirds of the stack."""
    start = n_layer // 3
    picks = np.linspace(start, n_layer - 1, num=min(6, n_layer - start)).round().astype(int)
    return sorted(set(int(p) for p in picks))


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
