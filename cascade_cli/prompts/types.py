"""What the prompt service takes and gives: messages, sampling parameters, a streamed reply.

The HTTP server (cascade_cli/server) turns OpenAI requests into these and these into OpenAI
responses; the service (service.py) never sees HTTP.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

#: Roles a chat message may have (OpenAI's "developer" is read as "system").
ROLES = ("system", "developer", "user", "assistant")


@dataclass(frozen=True)
class Message:
    """One chat message; `content` already joined from text parts."""

    role: str
    content: str


@dataclass
class Params:
    """Sampling and stopping for one request. temperature 0 is greedy; seed None is random."""

    max_tokens: int | None = None  # None: until end of generation or the window's room
    temperature: float | None = None  # None: the `temperature` setting
    top_p: float | None = None  # None: the `top_p` setting
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    salt: str = ""  # cache_salt: only requests with the same salt share stored blocks
    think: bool | None = None  # a reasoning model thinks first (None: the `think` setting)
    #: ingested documents or collections the reply may recall from (cascade's `documents`)
    documents: list[str] = field(default_factory=list)


#: Asked between a prompt's blocks whether to give up (the request's client left).
Stop = Callable[[], bool]


def never() -> bool:
    return False


@dataclass
class Timings:
    """llama.cpp server's `timings`: prompt_n tokens decoded for the prompt (a conversation
    paged through the window decodes some twice), cache_n prompt tokens not decoded (restored,
    kept in the window, or paged out in the store): prompt_tokens - prompt_n, at least 0."""

    cache_n: int = 0
    prompt_n: int = 0
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    prompt_tokens: int = 0  # the whole prompt, as the request renders it
    rerank_ms: float = 0.0  # cascade's own: scoring the quote's passages (the rerank setting)

    def count(self, prompt_tokens: int, decoded: int) -> None:
        """Set the prompt's counts from its size and the tokens decoded for it."""
        self.prompt_tokens = prompt_tokens
        self.prompt_n = decoded
        self.cache_n = max(0, prompt_tokens - decoded)


@dataclass
class Result:
    """Filled when the reply's iterator is exhausted (or closed)."""

    finish_reason: str = "stop"  # "stop" (end of generation or a stop string) or "length"
    cancelled: bool = False  # cut short (client gone, server stopping): never a finished reply
    timings: Timings = field(default_factory=Timings)
    ttft_s: float = 0.0
    recall_s: float = 0.0  # searching older turns (long conversations only)
    recalled: list[str] = field(default_factory=list)  # labels of paged-out turns recalled
    #: where the documents' excerpts in the window came from (documents.locations.cite)
    sources: list[dict[str, Any]] = field(default_factory=list)


class Reply:
    """A streamed reply: iterate for text pieces (stop strings already cut off); `result` is
    complete once iteration ends. Setting `cancel` stops generation at the next token."""

    def __init__(self, pieces: Iterator[str], result: Result, cancel: threading.Event) -> None:
        self._pieces = pieces
        self.result = result
        self.cancel = cancel

    def __iter__(self) -> Iterator[str]:
        return self._pieces

    def text(self) -> str:
        """The whole reply (consumes the iterator)."""
        return "".join(self._pieces)
