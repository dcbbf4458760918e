"""Fuse passage rankings into chunk hits, and fill a window's recall budget with them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from cascade_cli.recall.lexical import PassageHit

#: Reciprocal-rank fusion constant (Cormack et al. use 60; smaller trusts top ranks more).
RRF_K = 20
#: Rankings that add to the fused score at a weight but never lead: "subject" is BM25 summed
#: over each chunk's passages (a chunk about the question's subject), which fills `ask`'s budget
#: after the exact hits; on 100 hand-written questions about four novels it paged the answer's
#: chunk in for 4 more (72 → 76; weight 1.0 did no better in a simulation).
SUPPORT = {"subject": 0.5}


@dataclass(frozen=True)
class Hit:
    """A chunk worth paging in: its fused score, best passage and the methods that found it."""

    owner: str
    chunk: int
    score: float
    passage: int
    via: tuple[str, ...]
    #: the methods that ranked this chunk first
    tops: tuple[str, ...] = ()


def by_chunk(ranking: Sequence[PassageHit]) -> list[PassageHit]:
    """The best passage of each chunk, in the ranking's order (a chunk ranks by its best)."""
    seen: set[tuple[str, int]] = set()
    out = []
    for h in ranking:
        if (h.owner, h.chunk) not in seen:
            seen.add((h.owner, h.chunk))
            out.append(h)
    return out


def fuse(rankings: Mapping[str, Sequence[PassageHit]], k: int = RRF_K) -> list[Hit]:
    """Reciprocal-rank fusion of chunk rankings; each method's own top chunk goes first (in
    fused order), so one method's strong hit — an exact rare word, a paraphrase — is never
    crowded out by chunks both methods ranked middling. SUPPORT rankings only add weight to the
    hits after those (the leaders keep their order without it)."""
    score: dict[tuple[str, int], float] = {}
    lead: dict[tuple[str, int], float] = {}  # without SUPPORT's weight
    best: dict[tuple[str, int], tuple[int, int]] = {}  # rank, passage
    via: dict[tuple[str, int], list[str]] = {}
    tops: dict[tuple[str, int], list[str]] = {}
    for name, ranking in rankings.items():
        weight = SUPPORT.get(name, 1.0)
        for r, h in enumerate(by_chunk(ranking)):
            key = (h.owner, h.chunk)
            score[key] = score.get(key, 0.0) + weight / (k + r + 1)
            via.setdefault(key, []).append(name)
            if name in SUPPORT:
                best.setdefault(key, (1 << 30, h.pidx))
                continue
            lead[key] = lead.get(key, 0.0) + 1.0 / (k + r + 1)
            if r < best.get(key, (1 << 30, 0))[0]:
                best[key] = (r, h.pidx)
            if r == 0:
                tops.setdefault(key, []).append(name)
    leaders = sorted(tops, key=lambda key: -lead[key])
    order = leaders + sorted((key for key in score if key not in tops), key=lambda key: -score[key])
    return [
        Hit(o, c, score[(o, c)], best[(o, c)][1], tuple(via[(o, c)]), tuple(tops.get((o, c), ())))
        for o, c in order
    ]


def agreed(hits: Sequence[Hit], methods: int) -> bool:
    """Whether every one of `methods` recall methods ranked the best hit first."""
    return bool(hits) and len(hits[0].tops) >= methods


def to_quote(hits: Sequence[Hit], policy: str, methods: int) -> list[Hit]:
    """The hits whose best passages `policy` quotes (`methods`: rankings the search fused)."""
    if policy == "agree":
        return list(hits[:1]) if agreed(hits, methods) else []
    if policy == "best":
        return list(hits[:1]) if hits and hits[0].tops else []
    if policy == "tops":
        return [h for h in hits if h.tops]
    return []


def fill(
    hits: Sequence[Hit],
    budget: int,
    n_chunks: Callable[[str], int],
    n_passages: Callable[[str, int], int],
    max_hits: int = 0,
    neighbors: int = 1,
) -> list[tuple[str, int]]:
    """(owner, chunk) pairs to page in, at most `budget` of them, best first: each hit
    (`max_hits` > 0 caps them), followed by up to `neighbors` adjacent chunks on a side where
    the hit's best passage touches the chunk's edge (the answer may run over the boundary)."""
    chosen: list[tuple[str, int]] = []

    def take(owner: str, chunk: int) -> None:
        if len(chosen) < budget and 0 <= chunk < n_chunks(owner) and (owner, chunk) not in chosen:
            chosen.append((owner, chunk))

    for n, hit in enumerate(hits):
        if len(chosen) >= budget or (max_hits and n >= max_hits):
            break
        take(hit.owner, hit.chunk)
        last = n_passages(hit.owner, hit.chunk) - 1
        for d in range(1, neighbors + 1):
            if hit.passage == last:
                take(hit.owner, hit.chunk + d)
            if hit.passage == 0:
                take(hit.owner, hit.chunk - d)
    return chosen
