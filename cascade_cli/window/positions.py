"""Where pages go in a window that keeps what stays: which kept pages stay contiguous, and the
start position of each page that comes in (window/pages.py moves the cells)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

#: Free positions between two pages that are left as they are (not worth a restore).
SMALL_GAP = 128


class Piece(Protocol):
    """What placement needs of a page: its key and its length in tokens."""

    @property
    def key(self) -> str: ...

    @property
    def n(self) -> int: ...


def adjacent(target: Sequence[Piece], at: Mapping[str, int], kept: set[str]) -> set[str]:
    """The kept pages that will still be contiguous with what follows them. Everything
    after the first page (the system prompt) ends up as one run — recalled chunks right
    before the recent turns, as in a conversation — so a kept page that a gap would
    separate from the next one is placed again (a restore of a small chunk) rather than
    left behind: distance from the message is what a small model's attention pays for. A
    gap of at most SMALL_GAP positions (a quote or frame that was dropped) is left."""
    keep = set(kept)
    expected: int | None = None  # where the page after this one will start
    for p in reversed(target[1:]):
        if p.key in keep:
            pos = at[p.key]
            if expected is not None and not 0 <= expected - (pos + p.n) <= SMALL_GAP:
                keep.discard(p.key)
                expected -= p.n
            else:
                expected = pos
        elif expected is not None:
            expected -= p.n
    return keep


def placement(
    target: Sequence[Piece], held: Mapping[str, int]
) -> tuple[dict[str, int], list[tuple[str, int]]]:
    """(start position of every target page, [(kept page, shift up)]) for placing the
    pages that come in: right-aligned in the gap before the next kept page, or at the end."""
    at: dict[str, int] = {}
    shifts: list[tuple[str, int]] = []
    moved = 0  # how far the kept pages from here on have moved up
    prev_end = 0
    i = 0
    while i < len(target):
        p = target[i]
        if p.key in held:
            at[p.key] = held[p.key] + moved
            prev_end = at[p.key] + p.n
            i += 1
            continue
        j = i
        while j < len(target) and target[j].key not in held:
            j += 1
        run = sum(q.n for q in target[i:j])
        start = prev_end
        if j < len(target):
            nxt = held[target[j].key] + moved
            if nxt - prev_end >= run:
                start = nxt - run  # into the gap, just before what follows
            else:
                shifts.append((target[j].key, run - (nxt - prev_end)))
                moved += run - (nxt - prev_end)
        for q in target[i:j]:
            at[q.key] = start
            start += q.n
        prev_end = start
        i = j
    return at, shifts
