"""A llama_context with several sequences over one unified KV cache, plus its batch."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from types import TracebackType

import numpy as np
import numpy.typing as npt

from cascade_cli.engine._llama import ll
from cascade_cli.engine.model import GGML_TYPE_F16, Model
from cascade_cli.errors import ContextFullError, EngineError

_FLASH = {"auto": -1, "off": 0, "on": 1}
Buffer = bytes | bytearray | memoryview | npt.NDArray[np.uint8]


def resolve_flash_attn(setting: str) -> bool:
    """Concrete flash-attention choice: 'auto' means on only when a GPU backend is present."""
    if setting == "auto":
        return bool(ll.llama_supports_gpu_offload())
    return setting == "on"


class Batch:
    """Owns a llama_batch of up to `capacity` tokens, one sequence id per token."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._b: ll.llama_batch | None = ll.llama_batch_init(capacity, 0, 1)
        b = self._b
        self.tokens = np.ctypeslib.as_array(b.token, shape=(capacity,))
        self.pos = np.ctypeslib.as_array(b.pos, shape=(capacity,))
        self.n_seq = np.ctypeslib.as_array(b.n_seq_id, shape=(capacity,))
        self.logits = np.ctypeslib.as_array(b.logits, shape=(capacity,))
        self._seq_ptrs = [b.seq_id[i] for i in range(capacity)]

    @property
    def raw(self) -> ll.llama_batch:
        if self._b is None:
            raise EngineError("batch used after close")
        return self._b

    def fill(self, tokens: Sequence[int], pos0: int, seq_id: int, want: Sequence[int]) -> None:
        """Load tokens at positions pos0.. into seq_id; `want` lists batch rows that need logits."""
        n = len(tokens)
        raw = self.raw
        raw.n_tokens = n
        self.tokens[:n] = tokens
        self.pos[:n] = np.arange(pos0, pos0 + n, dtype=np.int32)
        self.n_seq[:n] = 1
        self.logits[:n] = 0
        for i in want:
            self.logits[i] = 1
        for i in range(n):
            self._seq_ptrs[i][0] = seq_id

    def fill_rows(
        self, tokens: Sequence[int], pos: Sequence[int], seqs: Sequence[int], want: Sequence[int]
    ) -> None:
        """Load tokens with their own positions and sequence ids (several sequences in one
        decode); `want` lists batch rows that need logits."""
        n = len(tokens)
        raw = self.raw
        raw.n_tokens = n
        self.tokens[:n] = tokens
        self.pos[:n] = pos
        self.n_seq[:n] = 1
        self.logits[:n] = 0
        for i in want:
            self.logits[i] = 1
        for i, seq in enumerate(seqs):
            self._seq_ptrs[i][0] = seq

    def close(self) -> None:
        if self._b is not None:
            ll.llama_batch_free(self._b)
            self._b = None


#: The scratch context's batch: its decodes are short (a scored question, a few sequences).
SCRATCH_BATCH = 256


class Context:
    """Owns a llama_context (unified KV, n_seq_max sequences) and one batch; close() frees both."""

    def __init__(
        self,
        model: Model,
        n_ctx: int,
        n_seq_max: int = 4,
        n_batch: int = 512,
        n_threads: int = 1,
        flash_attn: str = "auto",
        type_k: int = GGML_TYPE_F16,
        type_v: int = GGML_TYPE_F16,
        swa_full: bool = True,
    ) -> None:
        self.model = model
        self.layout = model.cache_layout
        self.swa_full = swa_full
        self.layout_checked = False  # set once the store's codec has read this layout back
        self.flash_attn = resolve_flash_attn(flash_attn)
        self.type_k, self.type_v = type_k, type_v
        params = ll.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = n_seq_max
        params.kv_unified = True
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.flash_attn_type = _FLASH["on" if self.flash_attn else "off"]
        params.type_k = type_k
        params.type_v = type_v
        # swa_full (llama.cpp's default): sliding-window layers keep the whole window, so a
        # window that slides still holds every cell a decode can see; off, they keep
        # n_swa x n_seq_max + n_ubatch cells and reuse those that fell out of the window
        params.swa_full = swa_full
        params.no_perf = True
        handle = ll.llama_init_from_model(model.handle, params)
        if not handle:
            raise EngineError(
                f"llama.cpp could not create a {n_ctx}-token context",
                "Lower --gpu-cache-size or --gpu-layers; --debug shows llama.cpp's reason.",
            )
        self._h: ll.llama_context_p | None = handle
        self.mem = ll.llama_get_memory(handle)
        self.n_ctx = int(ll.llama_n_ctx(handle))
        self.n_seq_max = n_seq_max
        self.n_batch = n_batch
        self.n_threads = n_threads
        self.n_vocab = model.n_vocab
        self._scratch: Context | None = None
        #: seq_add moved cells since the last decode: llama.cpp re-ropes their keys on the next
        #: decode, so until then a state read of them carries keys roped for the old positions
        self.shift_pending = False
        try:
            self._batch = Batch(n_batch)
        except BaseException:
            ll.llama_free(handle)
            self._h = None
            raise

    @property
    def handle(self) -> ll.llama_context_p:
        if self._h is None:
            raise EngineError("context used after close")
        return self._h

    def fingerprint(self) -> str:
        """Model fingerprint plus this context's KV types. V's layout (transposed unless flash
        attention is on) is not part of it: the pager converts it on decode."""
        return self.model.fingerprint(self.type_k, self.type_v)

    def scratch(self, n_ctx: int) -> Context:
        """A small context beside this one, at least `n_ctx` cells: the same model, threads,
        attention and KV types (so seq-state blobs move between them), kept and closed with
        this one. For short decodes that must attend over a few cells, not over every cell of
        this context (a decode's attention spans all of a context's cells in use, masked)."""
        if self._scratch is not None and self._scratch.n_ctx < n_ctx:
            self._scratch.close()
            self._scratch = None
        if self._scratch is None:
            size = -(-max(n_ctx, 512) // 256) * 256
            self._scratch = Context(
                self.model, size, self.n_seq_max, SCRATCH_BATCH, self.n_threads,
                "on" if self.flash_attn else "off", self.type_k, self.type_v, self.swa_full,
            )  # fmt: skip
        return self._scratch

    def close(self) -> None:
        """Free the batch and the context (and its scratch context)."""
        if self._scratch is not None:
            self._scratch.close()
            self._scratch = None
        self._batch.close()
        if self._h is not None:
            ll.llama_free(self._h)
            self._h = None

    def __enter__(self) -> Context:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- compute ---------------------------------------------------------------------------------
    def decode(
        self, tokens: Sequence[int], pos0: int, seq_id: int = 0, logits: str = "last"
    ) -> npt.NDArray[np.float32]:
        """Decode tokens at explicit positions into one sequence.

        logits: 'last' → shape (n_vocab,), 'all' → (n, n_vocab), 'none' → empty array.
        """
        n = len(tokens)
        out: list[npt.NDArray[np.float32]] = []
        for start in range(0, n, self.n_batch):
            piece = tokens[start : start + self.n_batch]
            m = len(piece)
            want = list(range(m)) if logits == "all" else []
            if logits == "last" and start + m == n:
                want = [m - 1]
            self._batch.fill(piece, pos0 + start, seq_id, want)
            rc = ll.llama_decode(self.handle, self._batch.raw)
            if rc == 1:
                raise ContextFullError(
                    f"the context window is full ({self.n_ctx} tokens)",
                    "Start over with /reset, or raise --gpu-cache-size.",
                )
            if rc != 0:
                raise EngineError(f"llama_decode failed with code {rc}")
            self.shift_pending = False
            for row in want:
                out.append(self.logits_at(row))
        if logits == "last":
            return out[-1] if out else np.empty(0, dtype=np.float32)
        if logits == "all":
            return np.stack(out) if out else np.empty((0, self.n_vocab), dtype=np.float32)
        return np.empty(0, dtype=np.float32)

    def decode_rows(
        self, tokens: Sequence[int], pos: Sequence[int], seqs: Sequence[int], want: Sequence[int]
    ) -> None:
        """One decode of tokens each with its own position and sequence (at most n_batch);
        `want`: the batch rows whose logits logits_at reads afterwards."""
        self._batch.fill_rows(tokens, pos, seqs, want)
        rc = ll.llama_decode(self.handle, self._batch.raw)
        if rc == 1:
            raise ContextFullError(
                f"the context window is full ({self.n_ctx} tokens)",
                "Raise --gpu-cache-size.",
            )
        if rc != 0:
            raise EngineError(f"llama_decode failed with code {rc}")
        self.shift_pending = False

    def logits_at(self, row: int) -> npt.NDArray[np.float32]:
        """A copy of the logits of one output row of the last decode (-1 = last)."""
        ptr = ll.llama_get_logits_ith(self.handle, row)
        if not ptr:
            raise EngineError(f"no logits for batch row {row}")
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    # -- memory ops ------------------------------------------------------------------------------
    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        """Remove seq_id's cells with positions in [p0, p1)."""
        return bool(ll.llama_memory_seq_rm(self.mem, seq_id, p0, p1))

    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        """Shift positions in [p0, p1) of seq_id by delta (RoPE re-applied lazily)."""
        ll.llama_memory_seq_add(self.mem, seq_id, p0, p1, delta)
        self.shift_pending = self.shift_pending or delta != 0

    def settle(self, seq_id: int) -> None:
        """Apply pending position shifts now, before a state read (llama.cpp applies them at
        the start of a decode and has no other call for it): one token decoded into the empty
        sequence `seq_id` and removed. A no-op when nothing moved since the last decode."""
        if self.shift_pending:
            self.decode([0], 0, seq_id, logits="none")
            self.seq_rm(seq_id)

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        """Make dst share src's cells with positions in [p0, p1)."""
        ll.llama_memory_seq_cp(self.mem, src, dst, p0, p1)

    def pos_min(self, seq_id: int) -> int:
        return int(ll.llama_memory_seq_pos_min(self.mem, seq_id))

    def pos_max(self, seq_id: int) -> int:
        return int(ll.llama_memory_seq_pos_max(self.mem, seq_id))

    def clear(self) -> None:
        """Empty every sequence."""
        ll.llama_memory_clear(self.mem, True)
        self.shift_pending = False

    # -- state -----------------------------------------------------------------------------------
    def state_size(self, seq_id: int) -> int:
        """Exact bytes of seq_id's state blob."""
        return int(ll.llama_state_seq_get_size(self.handle, seq_id))

    def state_get(
        self, seq_id: int, out: npt.NDArray[np.uint8] | None = None
    ) -> npt.NDArray[np.uint8]:
        """Serialize seq_id's KV into `out` (or a new array); returns the filled view."""
        size = self.state_size(seq_id)
        if out is None:
            out = np.empty(size, dtype=np.uint8)
        if out.nbytes < size:
            raise EngineError(f"state buffer too small: {out.nbytes} < {size}")
        ptr = out.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        n = int(ll.llama_state_seq_get_data(self.handle, ptr, out.nbytes, seq_id))
        if n == 0 and size:
            raise EngineError(f"llama_state_seq_get_data failed for sequence {seq_id}")
        return out[:n]

    def state_set(self, seq_id: int, data: Buffer) -> int:
        """Restore a blob into seq_id (clearing it first); returns bytes read."""
        arr = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
        ptr = ctypes.cast(ctypes.c_void_p(arr.ctypes.data), ctypes.POINTER(ctypes.c_uint8))
        n = int(ll.llama_state_seq_set_data(self.handle, ptr, arr.nbytes, seq_id))
        if n == 0:
            raise ContextFullError(
                f"llama.cpp could not restore {arr.nbytes} bytes into sequence {seq_id}",
                "The window has no room for this chunk, or the state is from another layout.",
            )
        return n
