"""Sentence embeddings from a BERT-family GGUF (llama.cpp in embedding mode, mean pooling)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import numpy as np
import numpy.typing as npt

from cascade_cli.engine._llama import ll
from cascade_cli.engine.model import Model
from cascade_cli.errors import EngineError

F32 = npt.NDArray[np.float32]


class Embedder:
    """Owns an embedding model and its context; `embed` is thread-safe (one call at a time).

    Texts are packed several to a batch, one sequence each (the model is non-causal, so a
    sequence must fit one micro-batch); each is cut to the model's trained length.
    """

    def __init__(self, path: Path, threads: int = 1, batch: int = 2048, max_seqs: int = 64) -> None:
        self.model = Model(path, gpu_layers=-1)
        self.path = Path(path)
        try:
            params = ll.llama_context_default_params()
            params.embeddings = True
            params.pooling_type = ll.LLAMA_POOLING_TYPE_MEAN
            params.n_ctx = batch
            params.n_batch = batch
            params.n_ubatch = batch
            params.n_seq_max = max_seqs
            params.n_threads = threads
            params.n_threads_batch = threads
            params.no_perf = True
            handle = ll.llama_init_from_model(self.model.handle, params)
            if not handle:
                raise EngineError(f"llama.cpp could not create an embedding context for {path}")
        except BaseException:
            self.model.close()
            raise
        self._h: ll.llama_context_p | None = handle
        self.dim = int(ll.llama_model_n_embd(self.model.handle))
        self.max_tokens = min(batch, self.model.n_ctx_train)
        self.batch_tokens = batch
        self.max_seqs = max_seqs
        self._batch = ll.llama_batch_init(batch, 0, max_seqs)
        self._lock = threading.Lock()

    def tokens(self, text: str) -> list[int]:
        """The model's tokens for `text` with [CLS]/[SEP], cut to its trained length."""
        toks = self.model.tokenize(text, add_special=True, parse_special=False)
        if len(toks) > self.max_tokens:
            toks = [*toks[: self.max_tokens - 1], toks[-1]]
        return toks

    def embed(self, texts: Sequence[str]) -> F32:
        """Unit-length embeddings, one row per text (empty texts embed their special tokens)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        toks = [self.tokens(t) for t in texts]
        with self._lock:
            group: list[int] = []
            used = 0
            for i, t in enumerate(toks):
                if group and (used + len(t) > self.batch_tokens or len(group) == self.max_seqs):
                    self._run(group, toks, out)
                    group, used = [], 0
                group.append(i)
                used += len(t)
            if group:
                self._run(group, toks, out)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)

    def _run(self, group: list[int], toks: list[list[int]], out: F32) -> None:
        handle = self._handle()
        b = self._batch
        n = 0
        for seq, i in enumerate(group):
            for p, tok in enumerate(toks[i]):
                b.token[n] = tok
                b.pos[n] = p
                b.n_seq_id[n] = 1
                b.seq_id[n][0] = seq
                b.logits[n] = 1
                n += 1
        b.n_tokens = n
        rc = ll.llama_encode(handle, b)
        if rc != 0:
            raise EngineError(f"llama_encode failed with code {rc}")
        for seq, i in enumerate(group):
            ptr = ll.llama_get_embeddings_seq(handle, seq)
            if not ptr:
                raise EngineError("the embedding model returned no pooled embedding")
            out[i] = np.ctypeslib.as_array(ptr, shape=(self.dim,))

    def _handle(self) -> ll.llama_context_p:
        if self._h is None:
            raise EngineError("embedder used after close")
        return self._h

    def close(self) -> None:
        """Free the batch, the context and the model."""
        if self._h is not None:
            ll.llama_batch_free(self._batch)
            ll.llama_free(self._h)
            self._h = None
        self.model.close()

    def __enter__(self) -> Embedder:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
