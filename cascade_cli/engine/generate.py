"""Token-by-token generation with UTF-8-safe streaming."""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from dataclasses import dataclass, field

from cascade_cli.engine.context import Context
from cascade_cli.engine.loops import LoopGuard
from cascade_cli.engine.sampler import Sampler
from cascade_cli.errors import ContextFullError


class TokenStream:
    """Turns token bytes into text pieces, holding back incomplete UTF-8 sequences."""

    def __init__(self) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, data: bytes) -> str:
        return self._dec.decode(data)

    def flush(self) -> str:
        return self._dec.decode(b"", final=True)


@dataclass
class Generation:
    """Progress of one reply: tokens produced and the next free position."""

    pos: int
    tokens: list[int] = field(default_factory=list)
    stopped_by: str = ""  # "eog", "max_tokens", "context_full", "loop"


def generate(
    ctx: Context,
    sampler: Sampler,
    seq_id: int,
    state: Generation,
    max_tokens: int,
    limit: int | None = None,
) -> Iterator[str]:
    """Sample after the last decode (its last row must have logits) and yield text pieces.

    Each sampled token is decoded back into seq_id at state.pos; state is updated in place.
    `limit` is the first position the sequence may not use (default: the context size).
    With the sampler's repetition guard on ('stop', or 'dry' behind which it stands), the reply
    ends once its words loop (engine.loops): the copy that completes the loop is held back
    while it forms and then dropped, from the text and from state (tokens, pos), so neither the
    reader nor the window ever holds it.
    """
    model = ctx.model
    stream = TokenStream()
    guard = LoopGuard() if sampler.settings.guard != "off" else None
    limit = ctx.n_ctx if limit is None else limit
    held: list[tuple[str, int]] = []  # pieces the guard holds back, with their token counts
    count = 0  # tokens since the last piece
    for _ in range(max_tokens):
        token = sampler.sample(ctx, -1)
        if model.is_eog(token):
            state.stopped_by = "eog"
            break
        state.tokens.append(token)
        count += 1
        piece = stream.push(model.token_bytes(token))
        if piece and guard is None:
            yield piece
        elif piece and guard is not None:
            held.append((piece, count))
            if guard.push(piece):
                drop = _drop(held, guard.cut)
                del state.tokens[len(state.tokens) - drop :]
                state.pos -= drop - 1  # every dropped token but this one was decoded
                state.stopped_by = "loop"
                yield from (text for text, _ in held)
                return
            while held and sum(len(text) for text, _ in held[1:]) >= guard.hold:
                yield held.pop(0)[0]
        if piece:
            count = 0
        if state.pos >= limit:
            state.stopped_by = "context_full"
            break
        try:
            ctx.decode([token], state.pos, seq_id)
        except ContextFullError:
            state.stopped_by = "context_full"
            break
        state.pos += 1
    else:
        state.stopped_by = "max_tokens"
    yield from (text for text, _ in held)
    tail = stream.flush()
    if tail:
        yield tail


def _drop(held: list[tuple[str, int]], cut: int) -> int:
    """Remove the held pieces that reach into the last `cut` characters; their token count."""
    tokens = 0
    while held and cut > 0:
        text, n = held.pop()
        cut -= len(text)
        tokens += n
    return tokens
