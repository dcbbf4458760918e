"""Where a span of a document's text is: its pages, chapter, headings and lines (what a
citation names), from the document's location map."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from cascade_cli.documents.base import CHAPTER, HEADING, PAGE, Mark


@dataclass(frozen=True)
class Location:
    """One place a span touches: a page ("3"), a chapter or heading (its title; a heading's
    `level` 1-6) or a range of lines ("12-40")."""

    kind: str
    label: str
    level: int = 0

    def __str__(self) -> str:
        if self.kind == PAGE:
            return f"page {self.label}"
        if self.kind == "lines":
            first, _, last = self.label.partition("-")
            return f"line {first}" if first == last else f"lines {first}–{last}"
        return f"{self.kind} “{self.label}”"


def where(
    marks: Sequence[Mark], line_starts: Sequence[int], start: int, end: int
) -> list[Location]:
    """The locations the text span [start, end) touches, in this order: pages, chapters,
    headings (the one in effect at `start` with the headings above it, then those inside the
    span), then its line range when the format has lines. `marks` are sorted by start."""
    end = max(end, start + 1)
    out: list[Location] = []
    for kind in (PAGE, CHAPTER):
        of_kind = [m for m in marks if m.kind == kind]
        out += [Location(kind, m.label) for m in _touched(of_kind, start, end)]
    heads = [m for m in marks if m.kind == HEADING]
    i = bisect_right([m.start for m in heads], start)
    above: list[Mark] = []
    for m in reversed(heads[:i]):  # the heading in effect, then each heading above it
        if not above or m.level < above[-1].level:
            above.append(m)
            if m.level <= 1:
                break
    out += [Location(HEADING, m.label, m.level) for m in reversed(above)]
    out += [Location(HEADING, m.label, m.level) for m in heads[i:] if m.start < end]
    if line_starts:
        first = bisect_right(line_starts, start)
        last = bisect_right(line_starts, end - 1)
        out.append(Location("lines", f"{max(first, 1)}-{max(last, 1)}"))
    return out


def _touched(marks: list[Mark], start: int, end: int) -> list[Mark]:
    """The mark in effect at `start` (if any) and every later one that begins before `end`."""
    i = bisect_right([m.start for m in marks], start)
    return marks[max(i - 1, 0) : i] + [m for m in marks[i:] if m.start < end]
