"""The fixed prompt frame around a document: a sink prefix before it, the question after it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cascade_cli.engine import Model
from cascade_cli.engine.template import tokenize_parts

SYSTEM = (
    "You are a helpful assistant. Answer the question using the document excerpts. "
    "Quote exact numbers, names and phrases from them."
)
INTRO = "Here are excerpts from a document:\n\n"
#: What the answer follows (config.Settings.ask_cue; measured in BENCHMARKS.md#answers).
CUE = "Answer: "
_MARK = "@@CASCADE-DOCUMENT@@"


@dataclass(frozen=True)
class Frame:
    """Token ids of the prefix (attention sink) and a renderer for the question suffix."""

    prefix: list[int]
    after_doc: str  # template text between the document and the question
    after_question: str  # template text that closes the user turn and opens the reply
    cue: str = CUE  # what the reply follows ("" while a reasoning model thinks first)


_FRAMES: dict[tuple[int, str, str, bool, str], Frame] = {}


def frame(model: Model, system: str = SYSTEM, cue: str = CUE) -> Frame:
    """The model's frame (computed once per loaded model, system prompt, `think` and cue)."""
    key = (id(model), str(model.path), system, model.think, cue)
    if key not in _FRAMES:
        _FRAMES[key] = _build(model, system, cue)
    return _FRAMES[key]


def _build(model: Model, system: str, cue: str) -> Frame:
    """Split the chat template around the document so chunks can sit between the two halves."""
    sys_mark = "@@CASCADE-SYSTEM@@"
    rendered = model.apply_chat_template([("system", sys_mark), ("user", INTRO + _MARK)])
    before, _, after = rendered.split(_MARK, 1)[0].partition(sys_mark)
    prefix = tokenize_parts(model, [(before, True), (system, False), (after, True)], True)
    probe = "@@CASCADE-QUESTION@@"
    full = model.apply_chat_template([("system", system), ("user", f"{_MARK}\n\n{probe}")])
    after_mark = full.split(_MARK, 1)[1]
    between, closing = after_mark.split(probe, 1)
    thinking = model.think and bool(model.reasoning)  # its reply opens with its reasoning
    return Frame(prefix, between, closing + model.reply_opening, "" if thinking else cue)


def question_tokens(
    model: Model, fr: Frame, question: str, evidence: Sequence[str] = (), most: int = 0
) -> list[int]:
    """Tokens that follow the last chunk: separator, the passages recall ranked best (quoted
    again right before the question, where a small model reads best), the question, the reply
    header, and the frame's cue (the ask_cue setting; "Answer: " for SmolLM2). Measured on
    SmolLM2's 20 needle trials: 11/20 without the cue, 16/20 without the "Question: " label,
    18/20 with both. `most` > 0: the longest passages
    are cut until all of it takes at most `most` tokens."""
    head = [(fr.after_doc, True)]
    tail = question_tail(fr, question)
    lines = [" ".join(e.split()) for e in evidence]
    while lines:
        parts = [*head, ("Most relevant lines:\n", True)]
        parts += [("- " + line + "\n", False) for line in lines]
        tokens = tokenize_parts(model, [*parts, ("\n", True), *tail])
        over = len(tokens) - most
        if most <= 0 or over <= 0:
            return tokens
        longest = max(range(len(lines)), key=lambda i: len(lines[i]))
        lines[longest] = lines[longest][: max(0, len(lines[longest]) - 3 * over - 8)]
        lines = [line for line in lines if len(line) > 8]
    return tokenize_parts(model, head + tail)  # the question is never parsed as special


def question_tail(fr: Frame, question: str) -> list[tuple[str, bool]]:
    return [
        ("Question: ", True),
        (question.strip(), False),  # never parsed as special
        (f"{fr.after_question}{fr.cue}", True),
    ]
