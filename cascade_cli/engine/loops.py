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


def _started(ws: Sequence[str]) -> int:
    """How many of the last words (< NGRAM) match their copies one and two periods back: the
    start of a copy that would complete a loop if it went on."""
    n = len(ws)
    for m in range(NGRAM - 1, 0, -1):
        tail = list(ws[n - m :])
        for p in range(1, MAX_PERIOD + 1):
            if n - m - (TIMES - 1) * p < 0:
                break
            if all(list(ws[n - m - k * p : n - k * p]) == tail for k in range(1, TIMES)):
                return m
    return 0


class LoopGuard:
    """Fed a reply's text piece by piece; `push` says when its finished words start looping.

    The copy that completes a loop is never shown: after each piece `hold` is how many of the
    text's last characters could be the start of that copy (words that match their copies one
    and two periods back, and an unfinished word once a copy could precede it), to be held back
    like a partial stop string; when `push` says the text loops, `cut` is how many last
    characters belong to the completing copy, to be dropped.
    """

    def __init__(self) -> None:
        self._text = ""
        self.hold = 0
        self.cut = 0

    def push(self, piece: str) -> bool:
        self._text = (self._text + piece)[-_TAIL:]
        spans = [m.span() for m in _WORD.finditer(self._text)]
        partial = bool(spans) and spans[-1][1] == len(self._text)
        done = spans[:-1] if partial else spans  # the last word may go on in the next piece
        ws = [self._text[a:b].lower() for a, b in done]
        n = len(ws)
        if _END.search(piece) and ends_looping(ws):
            self.cut = len(self._text) - done[n - NGRAM][0]
            return True
        m = _started(ws)
        if m:
            self.hold = len(self._text) - done[n - m][0]
        elif partial and n >= TIMES - 1:
            self.hold = len(self._text) - spans[-1][0]
        else:
            self.hold = 0
        return False
