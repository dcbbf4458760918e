"""Reasoning models: replies that think before they answer, kept apart from the answer.

Two output formats are known (named by the model's chat template):
- "think": `<think> … </think>` before the answer (Qwen3, DeepSeek-R1 and its distills, SmolLM3,
  QwQ, Magistral's `[THINK]` is not one of them);
- "harmony": gpt-oss's channels, `<|channel|>analysis<|message|> … <|end|><|start|>assistant
  <|channel|>final<|message|> …` (llama.cpp renders these tokens as text for gpt-oss).

With thinking off (the default: a long document's answer should not wait for a page of
reasoning, nor spend `--max-tokens` on it), the reply is opened without it: an empty
`<think>\\n\\n</think>\\n\\n` block (what Qwen3's template writes when thinking is off), or
gpt-oss's final channel (cascade's choice: gpt-oss has no such mode). With it on, the reply is
opened with `<think>` (what the templates of QwQ and the R1 distills always write, and what
Qwen3 writes first when it thinks), gpt-oss's left to open its channel, and `Splitter` tells the
reasoning (`Thought` pieces) from the answer (plain `str` pieces) as the reply streams. What is
kept as the reply's text is the answer; a past reply is rendered as its answer after the empty
block (think) or in the final channel (harmony), whichever way it was reached.
"""

from __future__ import annotations

import re
from typing import Protocol

_OPEN, _CLOSE = "<think>", "</think>"
#: harmony's markers (llama.cpp renders them as text for gpt-oss)
_MARKS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>")
_HEADER_END = "<|message|>"
#: what ends a message; the last two also begin the next header
_MESSAGE_ENDS = ("<|end|>", "<|return|>", "<|call|>", "<|start|>", "<|channel|>")
_CHANNEL = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")
#: the marker texts of each format (their tokens are rendered even where they are control ones)
MARKERS = {"think": (_OPEN, _CLOSE), "harmony": (*_MARKS, "<|constrain|>")}


class Thought(str):
    """A piece of a reply's reasoning (a plain `str` piece is the answer)."""

    __slots__ = ()


class Templated(Protocol):
    def chat_template(self) -> str: ...


def detect(model: Templated) -> str:
    """The model's reasoning format ("think", "harmony") from its chat template, or ""."""
    text = model.chat_template()
    if "<|channel|>" in text:
        return "harmony"
    if _CLOSE in text:
        return "think"
    return ""


def opening(fmt: str, think: bool) -> str:
    """Template text decoded after the reply header of a model of format `fmt`."""
    if fmt == "think":
        return _OPEN if think else f"{_OPEN}\n\n{_CLOSE}\n\n"
    if fmt == "harmony" and not think:
        return FINAL
    return ""


def past(fmt: str, think: bool) -> str:
    """Template text between the opening and a past reply's answer (with thinking on: the
    reasoning, which is not kept, replaced by an empty one)."""
    if not think:
        return ""
    return {"think": f"\n\n{_CLOSE}\n\n", "harmony": FINAL}.get(fmt, "")


#: what opens gpt-oss's answer: also written before a past reply's text when thinking is on
FINAL = "<|channel|>final<|message|>"


def _held(text: str, marks: tuple[str, ...]) -> int:
    """Where a suffix of `text` that could begin one of `marks` starts (len(text): none)."""
    for i in range(max(0, len(text) - max(len(m) for m in marks) + 1), len(text)):
        tail = text[i:]
        if any(m.startswith(tail) for m in marks):
            return i
    return len(text)


class Splitter:
    """Splits a streamed reply of format `fmt`, opened with thinking on, into Thought and
    answer pieces; markers are dropped. A gpt-oss reply that opens no channel is all answer; a
    think block never closed is all reasoning."""

    def __init__(self, fmt: str, answering: bool = False) -> None:
        self.fmt = fmt
        self.buf = ""
        self.state = {"think": "reason", "harmony": "header"}.get(fmt, "answer")
        self.channel = ""
        self.fresh = True
        if answering:  # it continues an answer already begun (an assistant prefill)
            self.state = "message" if fmt == "harmony" else "answer"
            self.channel = "final"

    def push(self, piece: str) -> list[str]:
        """The pieces `piece` completes (Thought or str), in order."""
        self.buf += piece
        out: list[str] = []
        while True:
            before = (self.state, len(self.buf))
            self._step(out, final=False)
            if (self.state, len(self.buf)) == before:
                return [p for p in out if p]

    def flush(self) -> list[str]:
        """Whatever is still held, at the reply's end."""
        out: list[str] = []
        self._step(out, final=True)
        rest, self.buf = self.buf, ""
        if rest and self.state in ("reason", "answer", "message"):
            out.append(self._piece(rest))
        return [p for p in out if p]

    def _piece(self, text: str) -> str:
        if self.state == "reason" or (self.state == "message" and self.channel != "final"):
            return Thought(text)
        return text

    def _step(self, out: list[str], final: bool) -> None:
        if self.state == "answer":
            out.append(self.buf)
            self.buf = ""
        elif self.state == "reason":
            if self.fresh:  # the reasoning starts at its first non-blank character
                self.buf = self.buf.lstrip()
                self.fresh = not self.buf
            at = self.buf.find(_CLOSE)
            if at >= 0:
                out.append(Thought(self.buf[:at]))
                self.buf, self.state = self.buf[at + len(_CLOSE) :], "after"
            else:
                keep = len(self.buf) if final else _held(self.buf, (_CLOSE,))
                out.append(Thought(self.buf[:keep]))
                self.buf = self.buf[keep:]
        elif self.state == "after":  # the blank lines between the reasoning and the answer
            text = self.buf.lstrip()
            if text or final:
                self.buf, self.state = text, "answer"
        elif self.state == "header":
            at = self.buf.find(_HEADER_END)
            if at >= 0:
                named = _CHANNEL.search(self.buf[:at])
                self.channel = named.group(1) if named else "final"
                self.buf, self.state = self.buf[at + len(_HEADER_END) :], "message"
            else:
                text = self.buf.lstrip()
                if text and not (text.startswith("<|") or (not final and "<|".startswith(text))):
                    self.channel, self.state = "final", "message"  # no header: all answer
        elif self.state == "message":
            ends = [(self.buf.find(m), m) for m in _MESSAGE_ENDS if m in self.buf]
            if ends:
                at, mark = min(ends)
                out.append(self._piece(self.buf[:at]))
                rest = self.buf[at + len(mark) :]
                again = mark in ("<|start|>", "<|channel|>")  # a header begins with it
                self.buf, self.state = (mark + rest if again else rest), "header"
            else:
                keep = len(self.buf) if final else _held(self.buf, _MARKS)
                out.append(self._piece(self.buf[:keep]))
                self.buf = self.buf[keep:]


class Vocab(Protocol):
    think: bool

    @property
    def reasoning(self) -> str: ...

    @property
    def reasoning_marks(self) -> frozenset[int]: ...

    def token_bytes(self, token: int, special: bool = False) -> bytes: ...


def _answers(fmt: str, text: str) -> bool:
    """Whether a reply's `text` (opened with thinking on) has any answer text yet."""
    split = Splitter(fmt)
    pieces = split.push(text) + split.flush()
    return any(p.strip() for p in pieces if not isinstance(p, Thought))


def thought_tokens(model: Vocab, reply: list[int]) -> int:
    """How many of a reply's first tokens come before its answer (0 with thinking off): the
    Splitter's own reading of it, so what is kept is what was shown as the answer."""
    if not (model.think and model.reasoning) or not reply:
        return 0
    marks = model.reasoning_marks  # rendered as the stream rendered them (engine.generate)
    pieces = [model.token_bytes(t, t in marks) for t in reply]

    def text(n: int) -> str:
        return b"".join(pieces[:n]).decode("utf-8", "replace")

    lo, hi = 0, len(pieces)  # the answer's first token: the fewest tokens that show an answer
    if not _answers(model.reasoning, text(hi)):
        return len(pieces)
    while lo < hi:
        mid = (lo + hi) // 2
        if _answers(model.reasoning, text(mid + 1)):
            hi = mid
        else:
            lo = mid + 1
    return lo
