"""The embedding model: llama.cpp's output against a numpy BERT forward over the same GGUF."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import numpy.typing as npt

from cascade_cli.engine.embed import Embedder

F32 = npt.NDArray[np.float32]


def _ln(x: F32, w: F32, b: F32, eps: float = 1e-12) -> F32:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return np.asarray((x - mu) / np.sqrt(var + eps) * w + b, dtype=np.float32)


def _gelu(x: F32) -> F32:
    return np.asarray(0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))))


def reference(path: Path, ids: list[int]) -> F32:
    """Mean-pooled, normalised BERT embedding computed in numpy from the GGUF's tensors."""
    import gguf

    t = {x.name: np.asarray(x.data, dtype=np.float32) for x in gguf.GGUFReader(str(path)).tensors}
    n_layer = 1 + max(int(k.split(".")[1]) for k in t if k.startswith("blk."))
    x = t["token_embd.weight"][ids] + t["position_embd.weight"][: len(ids)]
    x = _ln(x + t["token_types.weight"][0], t["token_embd_norm.weight"], t["token_embd_norm.bias"])
    heads = 12
    for i in range(n_layer):

        def lin(name: str, h: F32, i: int = i) -> F32:
            return np.asarray(h @ t[f"blk.{i}.{name}.weight"].T + t[f"blk.{i}.{name}.bias"])

        q, k, v = (lin(n, x).reshape(len(ids), heads, -1) for n in ("attn_q", "attn_k", "attn_v"))
        s = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        ctx = np.einsum("hqk,khd->qhd", p, v).reshape(len(ids), -1)
        x = _ln(
            x + lin("attn_output", ctx),
            t[f"blk.{i}.attn_output_norm.weight"],
            t[f"blk.{i}.attn_output_norm.bias"],
        )
        h = lin("ffn_down", _gelu(lin("ffn_up", x)))
        x = _ln(x + h, t[f"blk.{i}.layer_output_norm.weight"], t[f"blk.{i}.layer_output_norm.bias"])
    e = x.mean(0)
    return np.asarray(e / np.linalg.norm(e), dtype=np.float32)


def test_embeddings_match_a_numpy_bert(embed_model_path: Path) -> None:
    texts = ["The pass key is 48213. Remember it.", "Who betrayed the captain?", ""]
    with Embedder(embed_model_path) as emb:
        assert emb.tokens("Hello world") == [101, 7592, 2088, 102]  # [CLS] hello world [SEP]
        got = emb.embed(texts)
        assert got.shape == (3, emb.dim) and np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-4)
        for text, vec in zip(texts, got, strict=True):
            want = reference(embed_model_path, emb.tokens(text))
            assert float(vec @ want) > 0.999, text
        # batching does not change a text's embedding
        assert np.allclose(emb.embed([texts[1]])[0], got[1], atol=1e-3)


def test_similar_sentences_are_closer(embed_model_path: Path) -> None:
    with Embedder(embed_model_path) as emb:
        q, a, b = emb.embed(
            [
                "What secret number was I asked to remember?",
                "The pass key is 86387. Remember it.",
                "The fog rolls over the hills of the city every evening.",
            ]
        )
        assert float(q @ a) > float(q @ b) + 0.2
