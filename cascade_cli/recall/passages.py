"""Sentence-bounded passages: the unit recall scores (a chunk is only the unit of paging)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cascade_cli.recall.scripts import RANGES

#: Passage size in words (~1.3 tokens a word for English BPE): sentences are added while a
#: passage stays within TARGET_WORDS; none exceeds MAX_WORDS (≲ 128 tokens).
TARGET_WORDS = 20
MAX_WORDS = 90
#: A passage shorter than this takes the next sentence if it stays within MAX_WORDS.
MIN_WORDS = 8

# A sentence ends at . ! ? (with closing quotes/brackets) before whitespace; at 。！？ (with
# closing quotes/brackets; Chinese and Japanese put no space after them); at a space between
# two Thai letters (Thai writes no sentence punctuation, a space ends a sentence or clause);
# or at a blank line.
_SENTENCE = re.compile(
    r".*?(?:[.!?]+[\"'”’)\]]*(?=\s)"
    r"|[。！？]+[\"'”’)\]」』）]*"
    r"|[\u0e00-\u0e7f](?=[ \t]+[\u0e00-\u0e7f])"
    r"|\n[ \t]*\n|\Z)",
    re.S,
)
#: A word for passage sizes: a run of non-space characters, but each character of a script
#: written without spaces (recall.scripts) counts as one (about one word's worth of tokens).
WORD = re.compile(f"[{RANGES}]|[^\\s{RANGES}]+")
#: A transcript's speaker label (how sessions and the server index a turn's text): a passage
#: never spans two speakers, so a quoted passage is one person's words.
SPEAKER = re.compile(r"\s*(?:User|Assistant|System):\s")


@dataclass(frozen=True)
class Passage:
    """`text` starts at character `start` of the chunk's text."""

    start: int
    text: str


def _sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of sentences, blank lines and line breaks ending them too."""
    spans: list[tuple[int, int]] = []
    for m in _SENTENCE.finditer(text):
        s, e = m.span()
        if e > s and text[s:e].strip():
            spans.append((s, e))
    return spans


def _split_long(text: str, s: int, e: int) -> list[tuple[int, int]]:
    """A sentence longer than MAX_WORDS cut at word boundaries (any character of a script
    without spaces is one)."""
    words = list(WORD.finditer(text, s, e))
    out = []
    for i in range(0, len(words), MAX_WORDS):
        group = words[i : i + MAX_WORDS]
        out.append((group[0].start(), group[-1].end()))
    return out


def split(text: str) -> list[Passage]:
    """Group whole sentences into passages of at most MAX_WORDS words, in order, covering the
    text; a single over-long sentence is cut at word boundaries."""
    spans: list[tuple[int, int, int]] = []  # start, end, words
    for s, e in _sentences(text):
        n = len(WORD.findall(text, s, e))
        if n > MAX_WORDS:
            spans += [(a, b, MAX_WORDS) for a, b in _split_long(text, s, e)]
        elif n:
            spans.append((s, e, n))
    groups: list[list[int]] = []  # [start, end, words]
    for s, e, n in spans:
        size = groups[-1][2] if groups else 0
        fits = size + n <= TARGET_WORDS or (size < MIN_WORDS and size + n <= MAX_WORDS)
        if groups and fits and not SPEAKER.match(text, s):
            groups[-1][1] = e
            groups[-1][2] += n
        else:
            groups.append([s, e, n])
    out = []
    for s, e, _ in groups:
        lead = len(text[s:e]) - len(text[s:e].lstrip())
        out.append(Passage(start=s + lead, text=text[s + lead : e].rstrip()))
    return [p for p in out if p.text]
