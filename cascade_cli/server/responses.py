"""OpenAI response objects (and llama.cpp's ``timings``) built from the service's Result."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from cascade_cli.engine.reasoning import Thought
from cascade_cli.prompts.types import Result, Timings


def new_id(prefix: str) -> str:
    """``chatcmpl-…`` / ``cmpl-…``: 24 random hex digits after the prefix."""
    return f"{prefix}-{secrets.token_hex(12)}"


def now() -> int:
    return int(time.time())


def usage(result: Result) -> dict[str, Any]:
    """OpenAI's usage: prompt_tokens is the whole prompt, cached_tokens the part not decoded."""
    t = result.timings
    return {
        "prompt_tokens": t.prompt_tokens,
        "completion_tokens": t.predicted_n,
        "total_tokens": t.prompt_tokens + t.predicted_n,
        "prompt_tokens_details": {"cached_tokens": t.cache_n},
    }


def timings(t: Timings) -> dict[str, Any]:
    """llama.cpp server's timings object."""

    def rates(n: int, ms: float) -> tuple[float, float]:
        per_token = ms / n if n else 0.0
        per_second = 1000.0 * n / ms if ms > 0 else 0.0
        return per_token, per_second

    prompt_per_token, prompt_per_second = rates(t.prompt_n, t.prompt_ms)
    predicted_per_token, predicted_per_second = rates(t.predicted_n, t.predicted_ms)
    return {
        "cache_n": t.cache_n,
        "prompt_n": t.prompt_n,
        "rerank_ms": round(t.rerank_ms, 3),
        "prompt_ms": round(t.prompt_ms, 3),
        "prompt_per_token_ms": round(prompt_per_token, 3),
        "prompt_per_second": round(prompt_per_second, 3),
        "predicted_n": t.predicted_n,
        "predicted_ms": round(t.predicted_ms, 3),
        "predicted_per_token_ms": round(predicted_per_token, 3),
        "predicted_per_second": round(predicted_per_second, 3),
    }


class Shape:
    """The objects of one response (chat or text completion), sharing id, created and model."""

    def __init__(self, chat: bool, model: str) -> None:
        self.chat = chat
        self.model = model
        self.id = new_id("chatcmpl" if chat else "cmpl")
        self.created = now()

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def whole(self, text: str, result: Result, reasoning: str = "") -> dict[str, Any]:
        """The non-streamed response (`reasoning`: a reasoning model's thinking, as
        `message.reasoning_content` — llama.cpp's and DeepSeek's field)."""
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
            if reasoning:
                choice["message"]["reasoning_content"] = reasoning
        else:
            choice["text"] = text
        choice["logprobs"] = None
        choice["finish_reason"] = result.finish_reason
        obj = "chat.completion" if self.chat else "text_completion"
        return {
            **self._head(obj),
            "system_fingerprint": None,
            "choices": [choice],
            "usage": usage(result),
            "timings": timings(result.timings),
            **({"sources": result.sources} if result.sources else {}),
        }

    def chunk(
        self, piece: str | None, *, role: bool = False, finish: str | None = None
    ) -> dict[str, Any]:
        """One streamed chunk: a delta (chat; a Thought piece as `reasoning_content`) or text
        (completions); ``finish`` ends it."""
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            delta: dict[str, Any] = {}
            if role:
                delta["role"] = "assistant"
            if isinstance(piece, Thought):
                delta["reasoning_content"] = str(piece)
            elif piece is not None:
                delta["content"] = piece
            choice["delta"] = delta
        else:
            choice["text"] = piece or ""
        choice["logprobs"] = None
        choice["finish_reason"] = finish
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._head(obj), "system_fingerprint": None, "choices": [choice]}

    def usage_chunk(self, result: Result) -> dict[str, Any]:
        """The last chunk when the client asked for usage: no choices."""
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {
            **self._head(obj),
            "system_fingerprint": None,
            "choices": [],
            "usage": usage(result),
            "timings": timings(result.timings),
        }


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event."""
    text = (
        data
        if isinstance(data, str)
        else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    )
    return f"data: {text}\n\n".encode()
