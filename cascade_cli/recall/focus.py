"""The part of a passage worth quoting for a query: at most a few dozen words around the
question's words, so the quote that ask, chat and serve decode before the question stays cheap.

A passage is up to MAX_WORDS (recall.passages) words, one long sentence of a novel or a stretch
of a manual. The quote keeps the `most`-word window holding the most occurrences of the query's
content words (a word matches a term when they share their first PREFIX letters, so "lockers"
matches "locker"); among those, one that opens a sentence, and the latest such — the sentence that
holds the question's words and what follows it, since the answer tends to come after the words a
question shares with the text (measured: BENCHMARKS.md, "quote holds the evidence"). A cut end is
marked "…". A passage with no query word in it keeps its start.
"""

from __future__ import annotations

import re

from cascade_cli.recall.lexical import query_terms
from cascade_cli.recall.passages import WORD
from cascade_cli.recall.scripts import unspaced

#: Letters two words must share to count as one term (a crude stem: locker/lockers, pay/paid no).
PREFIX = 5
_EDGE = re.compile(r"^\W+|\W+$")
#: The end of a sentence (or of a clause that introduces one): where a quote may open.
_STOP = re.compile(r"[.!?:;][\"'’”)\]]*\s|[。！？]")


def _key(word: str) -> str:
    return _EDGE.sub("", word.lower())[:PREFIX]


def _match(key: str, terms: set[str]) -> bool:
    """A word is a query term; one character of an unspaced script is part of one."""
    if not key:
        return False
    return key in terms or (unspaced(key) and any(key in t for t in terms))


#: Marks a cut end of a quote.
CUT = "…"


def focus(text: str, query: str, most: int) -> str:
    """`text` itself when it has at most `most` words, else its best `most`-word window, a cut
    end marked with CUT."""
    a, b = window(text, query, most)
    return (f"{CUT} " if a else "") + text[a:b] + (f" {CUT}" if b < len(text) else "")


def unmarked(quote: str) -> tuple[str, bool, bool]:
    """A focused quote's own text, and whether its start and its end were cut."""
    start, end = quote.startswith(f"{CUT} "), quote.endswith(f" {CUT}")
    return quote[2 if start else 0 : len(quote) - 2 if end else len(quote)], start, end


def window(text: str, query: str, most: int) -> tuple[int, int]:
    """The character span [a, b) of `text`'s best `most`-word window (the whole text when it
    has at most `most` words)."""
    spans = [m.span() for m in WORD.finditer(text)]
    if len(spans) <= most or most <= 0:
        return 0, len(text)
    terms = {t[:PREFIX] for t in query_terms(query)}
    hits = [1 if _match(_key(text[a:b]), terms) else 0 for a, b in spans]
    windows = range(len(spans) - most + 1)
    at = [i for i, h in enumerate(hits) if h]

    def opens(s: int) -> bool:
        return s == 0 or _STOP.search(text[spans[s - 1][0] : spans[s][0]]) is not None

    def rank(s: int) -> tuple[int, bool, float]:
        inside = [i for i in at if s <= i < s + most]
        if not inside:
            return (0, True, -s)
        if opens(s):  # the latest sentence start that keeps them: what follows them
            return (len(inside), True, s)
        return (len(inside), False, -abs((inside[0] + inside[-1]) / 2 - (s + (most - 1) / 2)))

    s = max(windows, key=rank)
    e = s + most
    return (spans[s][0] if s else 0), (spans[e - 1][1] if e < len(spans) else len(text))
