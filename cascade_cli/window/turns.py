"""The chat template split into per-message token segments.

A session's window is a concatenation of chunks — the system prompt, then one chunk per turn —
so each message must render on its own exactly as it would inside the whole conversation. The
template's own parts are tokenized with parse_special=True; message text never is (text such as
``<|im_start|>system`` typed by a user stays plain text).
"""

from __future__ import annotations

from dataclasses import dataclass

from cascade_cli.engine import Model
from cascade_cli.errors import EngineError

_MARK = "@@CASCADE-MESSAGE@@"


@dataclass(frozen=True)
class Template:
    """Template text around each role's content, and the reply header."""

    model: Model
    sys_open: str
    sys_close: str
    user_open: str
    user_close: str
    header: str  # opens the assistant's reply
    reply_close: str
    #: written before a past reply's text (with thinking on: engine.reasoning.past)
    reply_open: str = ""
    #: white space a past reply opens with (Mistral v7), where its text does not bring it
    reply_space: str = ""

    def special(self, text: str, first: bool = False) -> list[int]:
        return self.model.tokenize(text, add_special=first, parse_special=True) if text else []

    def plain(self, text: str) -> list[int]:
        return self.model.tokenize(text, add_special=False, parse_special=False)

    def system(self, text: str) -> list[int]:
        """Chunk 0: BOS (if the model wants one) and the rendered system message."""
        return self.special(self.sys_open, True) + self.plain(text) + self.special(self.sys_close)

    def user(self, text: str) -> list[int]:
        """A user message followed by the reply header: what is decoded before a reply."""
        return (
            self.special(self.user_open)
            + self.plain(text)
            + self.special(self.user_close + self.header)
        )

    def user_parts(self, text: str) -> tuple[list[int], list[int], list[int]]:
        """(opening, text, closing + header) token ids of a user message (long messages are
        paged through in pieces)."""
        return (
            self.special(self.user_open),
            self.plain(text),
            self.special(self.user_close + self.header),
        )

    def reply(self, text: str) -> list[int]:
        """A past reply's text as the window holds it after the reply header."""
        if self.reply_space and not text[:1].isspace():
            text = self.reply_space + text  # a client that trimmed it
        return self.special(self.reply_open) + self.plain(text)

    def close(self) -> list[int]:
        """Tokens that end a reply (decoded after the end-of-generation token is sampled)."""
        return self.special(self.reply_close)


def _split(rendered: str) -> tuple[str, str]:
    if rendered.count(_MARK) != 1:
        raise EngineError(
            "the model's chat template drops or repeats message text",
            "Use a model whose template renders each message once (ChatML, Llama 3, …).",
        )
    head, tail = rendered.split(_MARK)
    return head, tail


_TEMPLATES: dict[tuple[int, str, bool], Template] = {}


def template(model: Model) -> Template:
    """The model's template split per message (computed once per loaded model and `think`)."""
    key = (id(model), str(model.path), model.think)
    if key not in _TEMPLATES:
        _TEMPLATES[key] = _build(model)
    return _TEMPLATES[key]


def _build(model: Model) -> Template:
    render = model.apply_chat_template
    user_open, user_close = _split(render([("user", _MARK)], add_assistant=False))
    alone = render([("system", _MARK)], add_assistant=False)
    # Templates without a system role (Gemma) fold the system prompt into the first user turn,
    # which would make the first turn unlike the others; it becomes a user turn of its own.
    own_role = _MARK in alone
    sys_open, sys_close = _split(alone) if own_role else (user_open, user_close)
    plain = render([("user", _MARK)], add_assistant=False)
    opened = render([("user", _MARK)], add_assistant=True)
    if not opened.startswith(plain):
        raise EngineError(
            "the model's chat template renders the reply header inside the user message",
            "Use a model whose template renders each message on its own (ChatML, Llama 3, …).",
        )
    header = opened[len(plain) :]
    past_open, reply_close = _split(render([("assistant", _MARK)], add_assistant=False))
    # a past reply may open with more than the reply header: white space (Mistral v7's
    # "[/INST] reply": the reply's own first token's, kept as `reply_space` for trimmed ones) or,
    # for gpt-oss, `<|message|>` (it writes its channel itself: engine.reasoning); anything else
    # stays refused below, as a reply would open unlike the past ones
    extra = past_open[len(header) :] if past_open.startswith(header) else ""
    if extra.strip() and model.reasoning != "harmony":
        extra = ""
    # the pieces must add up to the whole conversation, or chunks could not be concatenated
    convo = [("system", "S"), ("user", "U1"), ("assistant", "A1"), ("user", "U2")]
    if not own_role:
        convo = [("user", "S"), *convo[1:]]
    whole = render(convo, add_assistant=True)
    pieces = (
        f"{sys_open}S{sys_close}{user_open}U1{user_close}{header}{extra}A1{reply_close}"
        f"{user_open}U2{user_close}{header}"
    )
    if whole != pieces:
        raise EngineError(
            "the model's chat template merges messages, so a conversation cannot be paged"
            " message by message",
            "Use a model whose template renders each message on its own (ChatML, Llama 3, …).",
        )
    # a reasoning model's reply opens with its thinking or without (engine.reasoning)
    header += model.reply_opening
    space = extra if not extra.strip() else ""
    return Template(
        model, sys_open, sys_close, user_open, user_close, header, reply_close, model.reply_past,
        space,
    )  # fmt: skip
