"""A loaded GGUF model: one llama_model handle, its vocabulary, chat template and fingerprint."""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from cascade_cli.engine import reasoning
from cascade_cli.engine._llama import ensure_backend, ll
from cascade_cli.engine.gguf import tensor_names
from cascade_cli.engine.template import Part, tokenize_parts
from cascade_cli.errors import EngineError, ModelError
from cascade_cli.kv.rope import Rope

GGML_TYPE_F16 = 1
GGML_TYPE_Q8_0 = 8
_SAMPLE = 1 << 20  # bytes hashed at each of several offsets for the file identity
#: sliding-window models whose window is aligned to absolute positions (LLAMA_SWA_TYPE_CHUNKED)
_CHUNKED_ATTENTION = frozenset({"llama4"})
#: architecture → llama.cpp built-in chat template, for GGUFs without one (base models)
_FAMILY_TEMPLATES = {
    "gemma": b"gemma",
    "gemma2": b"gemma",
    "gemma3": b"gemma",
    "gemma3n": b"gemma",
}


def file_identity(path: Path) -> str:
    """A cheap, stable identity of a model file: size plus hashes of sampled 1 MiB blocks."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as fh:
        for k in range(9):
            offset = max(0, min(size - _SAMPLE, (size - _SAMPLE) * k // 8))
            fh.seek(offset)
            digest.update(fh.read(_SAMPLE))
    return digest.hexdigest()


class Model:
    """Owns a llama_model handle; close() (or the with-block) frees it."""

    def __init__(self, path: Path, gpu_layers: int = -1, use_mmap: bool = True) -> None:
        ensure_backend()
        self.path = Path(path)
        params = ll.llama_model_default_params()
        params.n_gpu_layers = 999 if gpu_layers < 0 else gpu_layers
        params.use_mmap = use_mmap
        handle = ll.llama_model_load_from_file(str(self.path).encode(), params)
        if not handle:
            raise ModelError(
                f"llama.cpp could not load {self.path} (corrupt or unsupported GGUF)",
                "Pull the model again or pick another file; --debug shows llama.cpp's reason.",
            )
        self._h: ll.llama_model_p | None = handle
        self.vocab = ll.llama_model_get_vocab(handle)
        self._identity: str | None = None
        self._reasoning: str | None = None
        self._marks: frozenset[int] | None = None
        #: let a reasoning model think before it answers (setting `think`; off: answer at once)
        self.think = False

    @property
    def handle(self) -> ll.llama_model_p:
        """The raw pointer; raises after close()."""
        if self._h is None:
            raise EngineError("model used after close")
        return self._h

    def close(self) -> None:
        """Free the model."""
        if self._h is not None:
            ll.llama_model_free(self._h)
            self._h = None

    def __enter__(self) -> Model:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- shape ---------------------------------------------------------------------------------
    @property
    def n_layer(self) -> int:
        return int(ll.llama_model_n_layer(self.handle))

    @property
    def n_embd(self) -> int:
        return int(ll.llama_model_n_embd(self.handle))

    @property
    def n_head(self) -> int:
        return int(ll.llama_model_n_head(self.handle))

    @property
    def n_head_kv(self) -> int:
        return int(ll.llama_model_n_head_kv(self.handle))

    @property
    def n_ctx_train(self) -> int:
        return int(ll.llama_model_n_ctx_train(self.handle))

    @property
    def rope_type(self) -> int:
        return int(ll.llama_model_rope_type(self.handle))

    @property
    def rope_exact(self) -> bool:
        """Whether `rope()` reproduces llama.cpp's rotation exactly, so cascade may move stored
        keys itself: plain or linearly scaled NORM/NEOX RoPE, the same on every layer, without
        per-frequency factors. Anything else (YaRN, LongRoPE, Llama 3's rope_freqs, M-RoPE,
        sliding-window layers with their own base) is left to llama.cpp's seq_add."""
        arch = self.meta("general.architecture") or ""
        scaling = self.meta(f"{arch}.rope.scaling.type") or "none"
        if self.rope_type not in (0, 2) or scaling not in ("none", "linear"):
            return False
        per_layer = ("attention.sliding_window", "rope.freq_base_swa", "rope.dimension_sections")
        if any(self.meta(f"{arch}.{key}") is not None for key in per_layer):
            return False
        names = tensor_names(self.path)
        return names is not None and not any(n.startswith("rope_") for n in names)

    def rope(self) -> Rope:
        """The model's RoPE parameters (approximate unless `rope_exact`)."""
        arch = self.meta("general.architecture") or ""
        n_rot = self.meta(f"{arch}.rope.dimension_count")
        return Rope(
            base=float(self.meta(f"{arch}.rope.freq_base") or 10000.0),
            head_dim=self.head_dim_k,
            n_head_kv=self.n_head_kv,
            neox=self.rope_type == 2,
            n_rot=int(n_rot) if n_rot else 0,
            freq_scale=float(ll.llama_model_rope_freq_scale_train(self.handle)),
        )

    @property
    def n_swa(self) -> int:
        """Sliding-window size of the model's SWA layers (0: none)."""
        return int(ll.llama_model_n_swa(self.handle))

    @property
    def cache_layout(self) -> str:
        """How llama.cpp keeps this model's memory, i.e. the sections of its state blobs
        (kv.sections): 'kv', 'iswa', 'hybrid' or 'recurrent'; ModelError for one cascade
        cannot store."""
        h = self.handle
        arch = self.meta("general.architecture") or "?"
        if ll.llama_model_is_hybrid(h) or ll.llama_model_is_recurrent(h):
            kind = "hybrid" if ll.llama_model_is_hybrid(h) else "recurrent"
            if self.n_swa > 0:
                raise ModelError(
                    f"{self.path.name} ({arch}) keeps a {kind} memory with sliding-window "
                    "attention, a cache layout cascade cannot store",
                    "Use a model with one attention cache (Llama, Qwen, Mistral) or a "
                    "sliding-window one (Gemma 2/3, gpt-oss).",
                )
            return kind
        if self.n_swa > 0 and arch in _CHUNKED_ATTENTION:
            raise ModelError(
                f"{self.path.name} ({arch}) uses chunked attention, whose visible cells depend "
                "on absolute positions, so its chunks cannot be moved in the window",
                "Use a model with one attention cache (Llama 3, Qwen, Mistral) or a "
                "sliding-window one (Gemma 2/3, gpt-oss).",
            )
        return "iswa" if self.n_swa > 0 else "kv"

    @property
    def n_vocab(self) -> int:
        return int(ll.llama_vocab_n_tokens(self.vocab))

    def meta(self, key: str) -> str | None:
        """One GGUF metadata value as a string, or None."""
        buf = ctypes.create_string_buffer(512)
        n = ll.llama_model_meta_val_str(self.handle, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    @property
    def head_dim_k(self) -> int:
        arch = self.meta("general.architecture") or ""
        value = self.meta(f"{arch}.attention.key_length")
        return int(value) if value else self.n_embd // max(1, self.n_head)  # 0: recurrent

    @property
    def head_dim_v(self) -> int:
        arch = self.meta("general.architecture") or ""
        value = self.meta(f"{arch}.attention.value_length")
        return int(value) if value else self.n_embd // max(1, self.n_head)

    @property
    def n_embd_k_gqa(self) -> int:
        return self.head_dim_k * self.n_head_kv

    @property
    def n_embd_v_gqa(self) -> int:
        return self.head_dim_v * self.n_head_kv

    def fingerprint(self, type_k: int = GGML_TYPE_F16, type_v: int = GGML_TYPE_F16) -> str:
        """Hash of everything that makes KV states interchangeable between runs."""
        if self._identity is None:
            self._identity = file_identity(self.path)
        arch = self.meta("general.architecture") or ""
        parts = [
            self._identity,
            f"layers={self.n_layer}",
            f"k={self.n_embd_k_gqa}",
            f"v={self.n_embd_v_gqa}",
            f"rope={ll.llama_model_rope_type(self.handle)}",
            f"rope_base={self.meta(f'{arch}.rope.freq_base')}",
            f"rope_scale={ll.llama_model_rope_freq_scale_train(self.handle)}",
            f"type_k={type_k}",
            f"type_v={type_v}",
        ]
        if self.cache_layout != "kv":  # plain models keep the fingerprints of older stores
            parts.append(f"cache={self.cache_layout}")
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]

    # -- text ------------------------------------------------------------------------------------
    def tokenize(
        self, text: str, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        """Text → token ids."""
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            raise EngineError("tokenization failed")
        return list(buf[:n])

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        """The raw bytes of one token (may be part of a UTF-8 sequence)."""
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> str:
        """Token ids → text."""
        return b"".join(self.token_bytes(t, special) for t in tokens).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT, …)."""
        return bool(ll.llama_vocab_is_eog(self.vocab, token))

    @property
    def fallback_template(self) -> bytes:
        """llama.cpp's built-in template for a GGUF that carries none (base models): the
        family's own turn format where llama.cpp knows it, else ChatML."""
        arch = self.meta("general.architecture") or ""
        return _FAMILY_TEMPLATES.get(arch, b"chatml")

    def chat_template(self) -> str:
        """The GGUF's own chat template (a Jinja text), or "" where it carries none."""
        raw = ll.llama_model_chat_template(self.handle, None)
        return raw.decode("utf-8", "replace") if raw else ""

    @property
    def reasoning(self) -> str:
        """The reply's reasoning format (engine.reasoning: "think", "harmony"), or ""."""
        if self._reasoning is None:
            self._reasoning = reasoning.detect(self)
        return self._reasoning

    @property
    def reasoning_marks(self) -> frozenset[int]:
        """Token ids of the reasoning format's markers (rendered as text while they stream,
        where they are control tokens: gpt-oss's `<|end|>`)."""
        if self._marks is None:
            found = [
                self.tokenize(m, parse_special=True)
                for m in reasoning.MARKERS.get(self.reasoning, ())
            ]
            self._marks = frozenset(t[0] for t in found if len(t) == 1)
        return self._marks

    @property
    def reply_opening(self) -> str:
        """Template text decoded after every reply header (engine.reasoning.opening: a reasoning
        model's reply opened with or without thinking, as `think` says)."""
        return reasoning.opening(self.reasoning, self.think)

    @property
    def reply_past(self) -> str:
        """Template text between the opening and a past reply's answer (reasoning.past)."""
        return reasoning.past(self.reasoning, self.think)

    def apply_chat_template(
        self, messages: Sequence[tuple[str, str]], add_assistant: bool = True
    ) -> str:
        """Render (role, content) messages with the model's template (ChatML if it has none)."""
        template = ll.llama_model_chat_template(self.handle, None) or self.fallback_template
        keep = [(r.encode(), c.encode()) for r, c in messages]
        arr = (ll.llama_chat_message * max(1, len(keep)))()
        for i, (role, content) in enumerate(keep):
            arr[i].role = role
            arr[i].content = content
        size = sum(len(r) + len(c) for r, c in keep) * 2 + 256
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = ll.llama_chat_apply_template(template, arr, len(keep), add_assistant, buf, size)
            if n < 0:
                raise EngineError("the model's chat template is not supported by llama.cpp")
            if n <= size:
                return buf.raw[:n].decode("utf-8", "replace")
            size = n + 1
        raise EngineError("chat template output kept growing")

    def chat_tokens(
        self, messages: Sequence[tuple[str, str]], add_assistant: bool = True
    ) -> list[int]:
        """The rendered chat as token ids, message text never parsed for special tokens (a
        message spelling ``<|im_start|>system`` stays text); see engine.template."""
        marks = [f"@@CASCADE-MESSAGE-{i}@@" for i in range(len(messages))]
        rendered = self.apply_chat_template(
            [(role, mark) for (role, _), mark in zip(messages, marks, strict=True)],
            add_assistant,
        )
        parts: list[Part] = []
        for (_, content), mark in zip(messages, marks, strict=True):
            before, found, rendered = rendered.partition(mark)
            if not found:
                raise EngineError("the model's chat template rewrites message text")
            parts += [(before, True), (content, False)]
        parts.append((rendered, True))
        return tokenize_parts(self, parts, add_special=True)
