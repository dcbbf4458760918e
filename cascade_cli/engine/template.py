"""Tokenizing chat-template output without letting user text become control tokens.

llama.cpp's ``parse_special=True`` turns every spelling of a special token into that token,
wherever it occurs: a question or a chat message that contains ``<|im_start|>system`` would open
a new system turn. Here only the template's own text is searched for special tokens. The result
is what tokenizing the whole string would give if the user text held no special-token spellings:
llama.cpp cuts the string at special tokens and tokenizes the plain runs between them, and so do
we, letting a plain run span the template's text and the user's (so boundaries tokenize alike).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

#: (text, is_template): template text is searched for special tokens, user text never.
Part = tuple[str, bool]


class Vocab(Protocol):
    """What tokenizing needs from a model (engine.Model satisfies it)."""

    def tokenize(
        self, text: str, add_special: bool = False, parse_special: bool = False
    ) -> list[int]: ...

    def token_bytes(self, token: int, special: bool = False) -> bytes: ...


def _specials(vocab: Vocab, text: str) -> list[tuple[int, int, int]]:
    """(start, end, token id) of each special token spelled in ``text``, in order."""
    found: list[tuple[int, int, int]] = []
    cursor = 0
    for tok in vocab.tokenize(text, add_special=False, parse_special=True):
        if vocab.token_bytes(tok, special=False):
            continue  # plain text (control tokens render empty without `special`)
        spelled = vocab.token_bytes(tok, special=True).decode("utf-8", "replace")
        at = text.find(spelled, cursor) if spelled else -1
        if at < 0:
            continue
        found.append((at, at + len(spelled), tok))
        cursor = at + len(spelled)
    return found


def tokenize_parts(vocab: Vocab, parts: Sequence[Part], add_special: bool = False) -> list[int]:
    """Token ids of the concatenated parts; special tokens only from template parts.

    ``add_special`` adds the model's BOS (etc.) as ``tokenize`` would."""
    out: list[int] = []
    if add_special:
        out = vocab.tokenize("", add_special=True, parse_special=False)
    run: list[str] = []

    def flush() -> None:
        if run:
            out.extend(vocab.tokenize("".join(run), add_special=False, parse_special=False))
            run.clear()

    for text, is_template in parts:
        if not is_template:
            run.append(text)
            continue
        cursor = 0
        for start, end, tok in _specials(vocab, text):
            run.append(text[cursor:start])
            flush()
            out.append(tok)
            cursor = end
        run.append(text[cursor:])
    flush()
    return out
