"""Hard-wrapped text joined into paragraphs (plain text files and PDF text layers)."""

from __future__ import annotations

import itertools
import re

#: A hard-wrapped text: its long lines (the 75th percentile) are WRAP characters wide and its
#: median line EVEN of that (Gutenberg novels 0.97, a typeset PDF 0.97; code ~0.7). A line at
#: least FULL of the width is joined with the next.
WRAP = (40, 120)
EVEN = 0.85
FULL = 0.6
#: A line that starts like this keeps its break (a list item, an indented line).
_KEEPS = re.compile(r"\s|[-*•+]\s|\d+[.)]\s|[A-Za-z][.)]\s")


def unwrap(text: str) -> str:
    """A hard-wrapped text (a plain text as Project Gutenberg's, wrapped at ~70 columns; a PDF's
    typeset lines) with each paragraph's lines joined by spaces, so a book reads, tokenizes and
    chunks alike as text, PDF or EPUB; one character for one (a line break becomes a space:
    offsets, and so line numbers, stay). A break stays after a line shorter than FULL of the
    width (verse, an address, a paragraph's end) and before a blank, indented or list line.
    Not hard-wrapped: the text as it is."""
    lines = text.split("\n")
    widths = sorted(len(ln.rstrip()) for ln in lines if ln.strip())
    if len(widths) < 20:
        return text
    width = widths[int(0.75 * (len(widths) - 1))]
    full = FULL * width
    if not WRAP[0] <= width <= WRAP[1] or widths[len(widths) // 2] < EVEN * width:
        return text
    out = list(text)
    at = 0
    for line, nxt in itertools.pairwise(lines):
        at += len(line)  # the break after `line`
        if len(line.rstrip()) >= full and nxt.strip() and not _KEEPS.match(nxt):
            out[at] = " "
            if line.endswith("\r"):
                out[at - 1] = " "
        at += 1
    return "".join(out)
