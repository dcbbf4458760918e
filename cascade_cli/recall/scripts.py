"""Scripts written without spaces between words: Chinese, Japanese (and Korean hanja/kana) and
Thai. FTS5's `unicode61` tokenizer makes a whole run of such text one token, so no question ever
matches it; here each run becomes its overlapping character bigrams (the usual unit of CJK
retrieval: most Chinese and Japanese words are one or two characters, and a longer word is a
phrase of its bigrams), indexed and queried beside the text's spaced words in the same table.
"""

from __future__ import annotations

import re

#: Characters of scripts without spaces: CJK ideographs (with extension A and compatibility),
#: hiragana, katakana (with the half-width forms) and Thai.
RANGES = (
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\u0e00-\u0e7f"
)
RUN = re.compile(f"[{RANGES}]+")
#: A word for recall: a run of those characters, or of other letters and digits.
TOKEN = re.compile(f"[{RANGES}]+|[^\\W{RANGES}]+")


def unspaced(text: str) -> bool:
    """Whether `text` holds any character of a script without spaces."""
    return RUN.search(text) is not None


def bigrams(run: str) -> list[str]:
    """A run's overlapping character bigrams (a single character stays itself)."""
    if len(run) < 2:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def terms(text: str) -> list[str]:
    """Lower-cased words of `text` in order, each run of unspaced script as its bigrams."""
    out: list[str] = []
    for m in TOKEN.finditer(text.lower()):
        word = m.group()
        out += bigrams(word) if RUN.fullmatch(word) else [word]
    return out


def searchable(text: str) -> str:
    """What FTS5 indexes for a passage: the text itself where it has no unspaced script (so
    English passages index exactly as before), else its terms joined by spaces."""
    return " ".join(terms(text)) if unspaced(text) else text
