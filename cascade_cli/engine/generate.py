"""Token-by-token generation with UTF-8-safe streaming."""

from __future__ import annotations

import codecs
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field

from cascade_cli.engine.context import Context
from cascade_cli.engine.loops import LoopGuard
from cascade_cli.engine.reasoning import Splitter
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

    def buffering(self) -> bool:
        """Whether bytes of an incomplete character are waiting for the next token."""
        return bool(self._dec.getstate()[0])


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
    split: bool = True,
    answering: bool = False,
    sentences: bool = False,
) -> Generator[str, None, None]:
    """`_generate`'s text pieces; a reasoning model thinking (`Model.think`) yields its
    reasoning as engine.reasoning.Thought pieces and its answer as plain ones (`split` False:
    all as the model wrote it, markers included — a raw completion; `answering`: the reply
    continues an answer the prompt began, an assistant prefill; `sentences`: a reply the
    length limit or a loop stops ends at its last whole sentence, see `_generate`)."""
    fmt = ctx.model.reasoning if ctx.model.think else ""
    marks = ctx.model.reasoning_marks if fmt and split else frozenset()
    raw = _generate(ctx, sampler, seq_id, state, max_tokens, limit, marks, sentences)
    if not fmt or not split:
        yield from raw
        return
    splitter = Splitter(fmt, answering)
    try:
        for piece in raw:
            yield from splitter.push(piece)
        yield from splitter.flush()
    finally:
        raw.close()


def _generate(
    ctx: Context,
    sampler: Sampler,
    seq_id: int,
    state: Generation,
    max_tokens: int,
    limit: int | None,
    special: frozenset[int],
    sentences: bool = False,
) -> Generator[str, None, None]:
    """Sample after the last decode (its last row must have logits) and yield text pieces.

    Each sampled token is decoded back into seq_id at state.pos; state is updated in place.
    `limit` is the first position the sequence may not use (default: the context size).
    With the sampler's repetition guard on ('stop', or 'dry' behind which it stands), the reply
    ends once its words loop (engine.loops): the copy that completes the loop is held back
    while it forms and then dropped. Whenever the reply ends — a loop, or the consumer closing
    the generator (Ctrl-C, a client gone) — state keeps only the tokens of the text yielded
    (state.tokens, and state.pos no further), so the window and the transcript hold exactly
    what was shown. `special`: tokens rendered even where they are control ones (a reasoning
    format's markers). `sentences`: in the reply's last `stretch(max_tokens)` tokens, text is
    shown a whole sentence (or line) at a time, so a reply stopped by the length limit or a
    loop ends at its last whole sentence instead of inside one (what is held then is dropped,
    unless the reply shown so far itself ends inside a sentence: then nothing is gained).
    """
    model = ctx.model
    stream = TokenStream()
    guard = LoopGuard() if sampler.settings.guard != "off" else None
    limit = ctx.n_ctx if limit is None else limit
    pos0, base = state.pos, len(state.tokens)
    held: list[_Held] = []  # pieces the guard holds back
    count = 0  # tokens since the last piece
    shown = 0  # tokens whose text was yielded
    ending = _Ending(stretch(max_tokens) if sentences else 0)

    def keep_shown() -> None:
        del state.tokens[base + shown :]
        state.pos = min(state.pos, pos0 + shown)

    def out(pieces: list[_Held]) -> Iterator[str]:
        nonlocal shown
        for h in pieces:
            shown += h.tokens
            yield h.text

    try:
        for made in range(max_tokens):
            left = max_tokens - made - 1  # tokens the limit allows after this one
            token = sampler.sample(ctx, -1)
            if model.is_eog(token):
                state.stopped_by = "eog"
                break
            state.tokens.append(token)
            count += 1
            piece = stream.push(model.token_bytes(token, token in special))
            if piece and guard is None:
                yield from out(ending.push(_Held(piece, count), left))
                count = 0
            elif piece and guard is not None:
                if held and held[-1].open:  # a character split across pieces stays whole
                    held[-1].text += piece
                    held[-1].tokens += count
                else:
                    held.append(_Held(piece, count))
                held[-1].open, count = stream.buffering(), 0
                if guard.push(piece):
                    _drop(held, guard.cut)
                    state.stopped_by = "loop"
                    while held:
                        yield from out(ending.push(held.pop(0), left))
                    yield from out(ending.finish(cut=True))
                    keep_shown()
                    return
                while (
                    held and not held[0].open and sum(len(h.text) for h in held[1:]) >= guard.hold
                ):
                    yield from out(ending.push(held.pop(0), left))
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
        while held:
            yield from out(ending.push(held.pop(0), 0))
        tail = stream.flush()
        if tail:
            yield from out(ending.push(_Held(tail, count), 0))
            count = 0
        yield from out(ending.finish(cut=state.stopped_by in ("max_tokens", "context_full")))
        if ending.dropped:
            keep_shown()
    except BaseException:  # the consumer stopped reading (GeneratorExit), Ctrl-C, a failure
        keep_shown()  # what was not yielded is not kept
        raise


@dataclass
class _Held:
    """A piece the repetition guard holds back, the tokens it took, and whether it ends inside
    a character (the next piece completes it and joins it)."""

    text: str
    tokens: int
    open: bool = False


#: Text that ends a sentence: . ! ? or … and any closing quotes or brackets, or a line's end.
_SENTENCE_END = re.compile(r"(?:[.!?…][\"'”’)\]]*|\n)\s*$")


def stretch(max_tokens: int) -> int:
    """How many of a reply's last tokens are shown a whole sentence at a time."""
    return min(48, max_tokens // 4)


class _Ending:
    """Holds back, in the reply's last `stretch` tokens, the text after its last sentence end
    (a piece that ends with one, followed by one that starts with white space, or a newline)."""

    def __init__(self, stretch: int) -> None:
        self.stretch = stretch
        self.pending: list[_Held] = []
        self.whole = True  # the text shown so far ends at a sentence's end
        self.dropped = False

    def push(self, piece: _Held, left: int) -> list[_Held]:
        """The pieces to show now, `piece` among them or held."""
        if left >= self.stretch and not self.pending:
            return self._show([piece])
        self.pending.append(piece)
        return self._show(self._upto(self._ends(final=False)))

    def finish(self, cut: bool) -> list[_Held]:
        """What is left to show when the reply ends: all of it; where the length limit or a loop
        cut it (`cut`), only up to its last sentence end — unless no sentence ended at all."""
        if not cut or not "".join(h.text for h in self.pending).strip():
            return self._show(self._upto(len(self.pending)))
        ends = self._ends(final=True)
        if ends or self.whole:
            ready = self._upto(ends)
            self.dropped = bool(self.pending)
            self.pending = []
            return self._show(ready)
        return self._show(self._upto(len(self.pending)))  # nothing ended: keep what was said

    def _ends(self, final: bool) -> int:
        """How many pending pieces end at the last sentence end among them."""
        for i in range(len(self.pending), 0, -1):
            text = self.pending[i - 1].text
            after = self.pending[i].text if i < len(self.pending) else ""
            if text.endswith("\n") or (
                _SENTENCE_END.search(text) and (after[:1].isspace() or (final and not after))
            ):
                return i
        return 0

    def _upto(self, n: int) -> list[_Held]:
        ready, self.pending = self.pending[:n], self.pending[n:]
        return ready

    def _show(self, pieces: list[_Held]) -> list[_Held]:
        text = "".join(h.text for h in pieces)
        if text.strip():
            self.whole = bool(_SENTENCE_END.search(text))
        return pieces


def _drop(held: list[_Held], cut: int) -> None:
    """Remove the held pieces that reach into the last `cut` characters."""
    while held and cut > 0:
        cut -= len(held.pop().text)
