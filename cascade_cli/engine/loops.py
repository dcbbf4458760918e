"""A reply that loops: the same words over and over ("The answer is: The answer is: …").

The test, used by the `stop` repetition guard and by the benchmarks' count of looping replies:
an n-gram of NGRAM words that occurs TIMES times in a row at a fixed period of at most
MAX_PERIOD words (the period is the loop's length). Words are runs of letters and digits,
lower-cased, so a number is one word and punctuation between copies does not hide a loop.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

NGRAM = 3
TIMES = 3
#: Longest loop (in words) looked for: a repeated sentence or two.
MAX_PERIOD = 48
_WORD = re.compile(r"\w+")
_END = re.compile(r"\W")
#: Characters of a reply's end the guard re-reads per piece: TIMES copies of the longest loop.
_TAIL = 2000


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def ends_looping(ws: Sequence[str]) -> bool:
    """Whether `ws` ends with an NGRAM-word n-gram repeated TIMES times at one period."""
    n = len(ws)
    if n < NGRAM:
        return False
    last = list(ws[n - NGRAM :])
    for p in range(1, min(MAX_PERIOD, (n - NGRAM) // (TIMES - 1)) + 1):
        if all(list(ws[n - NGRAM - k * p : n - k * p]) == last for k in range(1, TIMES)):
            return True
    return False


def loops(text: str) -> bool:
    """Whether a text loops anywhere (some prefix of its words ends looping)."""
    ws = words(text)
    return any(ends_looping(ws[:end]) for end in range(NGRAM, len(ws) + 1))


class LoopGuard:
    """Fed a reply's text piece by piece; `push` says when its finished words start looping."""

    def __init__(self) -> None:
        self._text = ""

    def push(self, piece: str) -> bool:
        self._text = (self._text + piece)[-_TAIL:]
        if not _END.search(piece):
            return False  # no word finished in this piece
        ws = words(self._text)
        if _WORD.search(self._text[-1:]):
            ws = ws[:-1]  # the last word may go on in the next piece
        return ends_looping(ws)
