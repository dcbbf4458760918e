"""One planner lays out every window: `ask`, chat sessions and the server's requests.

A request names the window, the fixed head (attention sink or system prompt), the tokens decoded
after the layout (question or message, and the reply's reserve), the conversation so far (oldest
first; empty for `ask`) and the documents recall may page in. The plan says what stays, what is
recalled and in which order, and which passages are quoted right before the question:

- the newest turns that fit stay, leaving RECALL_SHARE of the window (and the quote's room) for
  recall; everything stays when the whole conversation fits and no document is in it;
- recall searches the documents and the turns that did not stay — each owner's search scoped to
  its own eligible chunks *before* the rankings are fused, so another conversation sharing a
  corpus never crowds this one's hits out;
- a question about documents (`fill`) fills the budget with the best hits and their neighbours; a
  conversation takes only strong hits (a method ranked it first, or both found it), at most
  MAX_RECALLED;
- quotes: the QUOTE policy over the chosen hits, each passage cut to its QUOTE_WORDS words around
  the query's words (recall.focus), in at most QUOTE_TOKENS tokens;
- a chunk the store cannot serve (evicted by the disk budget) is skipped with a note;
- the message being answered (a long one's stored blocks, `current`) stays whole when it fits
  the window at all, taking the share recall and the quote would have had; `cut` counts its
  blocks that do not fit (chat pages them out, recallable; the server refuses the request).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from cascade_cli.config import Settings
from cascade_cli.errors import ContextFullError, NotFoundError
from cascade_cli.recall import Hit, Recall, fill
from cascade_cli.recall.select import RRF_K, to_quote

#: Share of the window kept for recall once a conversation no longer fits.
RECALL_SHARE = 0.25
#: Longest recall query, in characters (the end of a longer message).
QUERY_CHARS = 300
#: At most this many chunks are recalled for one conversation message.
MAX_RECALLED = 2
#: Which recalled passage is quoted again right before the question: 'best' — the best
#: passage of the fused first hit, when any recall method ranked it first (so it fires where
#: BM25 and the embeddings disagree, unlike 'agree'). Chosen on *Emma* conversations, where
#: 'tops' (each method's first) put a second, unrelated passage in the note that the model
#: echoed (locker direct 2/5); see BENCHMARKS.md, "One planner".
QUOTE = Settings.quote  # the setting's default (config.py), the one place it is set
#: Words of a passage quoted (shared by the quotes of one request): the window around the
#: question's words (recall.focus). Chosen on the tuning texts (the sed manual, Persuasion and
#: three more novels) with Qwen2.5-Coder 0.5B; see BENCHMARKS.md, "Quotes".
QUOTE_WORDS = 64
#: Most tokens all quoted passages take together (the quote's frame comes on top: QUOTE_ROOM).
QUOTE_TOKENS = 96
#: Window positions kept for a quote (passages and their frame) while quoting is on.
QUOTE_ROOM = QUOTE_TOKENS + 32
#: Window order of recalled chunks ('relevance': best run nearest the question; 'document').
ORDER = "relevance"
#: A fused score this high means a method ranked the chunk first, or both methods found it.
MIN_SCORE = 1.0 / (RRF_K + 1) - 1e-9


def reserve(max_tokens: int, window: int, closing: int = 0) -> int:
    """Positions kept for the reply: max_tokens, at most a quarter of the window, plus the
    `closing` tokens that follow a reply in the window."""
    return max(1, min(max_tokens, window // 4)) + closing


def block_for(block_size: int, window: int) -> int:
    """Most tokens in one stored piece of a conversation: --block-size, or less so that any
    piece fits the share of the window kept for recall."""
    return max(16, min(block_size, int(window * RECALL_SHARE)))


def query_of(text: str) -> str:
    """What a message asks: all of a short message, the last QUERY_CHARS characters (from a
    sentence start) of a long one — a pasted text followed by a question asks the question."""
    if len(text) <= QUERY_CHARS:
        return text
    tail = text[-QUERY_CHARS:]
    marks = [
        i for i in (tail.find(". "), tail.find("? "), tail.find("! "), tail.find("\n")) if i >= 0
    ]
    cut = min(marks, default=-1)
    return tail[cut + 1 :].strip() if 0 <= cut < len(tail) - 40 else tail


def fit_recent(sizes: Sequence[int], room: int) -> int:
    """How many of the last items (token counts, oldest first) fit in `room` tokens together."""
    used = n = 0
    for size in reversed(sizes):
        if used + size > room:
            break
        used += size
        n += 1
    return n


def staying(sizes: Sequence[int], window: int, head: int, tail: int, quoting: bool = True) -> int:
    """How many of the newest pieces (token counts, oldest first) stay in the window once the
    conversation does not fit: those that leave RECALL_SHARE of it (and the quote's room) free."""
    room = QUOTE_ROOM if quoting else 0
    return fit_recent(sizes, window - head - tail - room - int(window * RECALL_SHARE))


@dataclass(frozen=True)
class Turn:
    """A stored piece of the conversation: a chat turn's chunk or an API request's block."""

    key: str
    n: int
    owner: str
    index: int
    current: bool = False  # a block of the message being answered (a long message)


@dataclass
class Source:
    """A document recall may page in from."""

    owner: str
    name: str
    chunks: int
    #: tokens per chunk, and the document's tokens (its last chunk may be short)
    block: int
    tokens: int
    #: chunks the store cannot serve (evicted by the disk budget, held by no remote tier)
    gone: frozenset[int] = frozenset()
    #: tokens around its excerpts, paid once when any is recalled (a document in a conversation)
    frame: int = 0
    #: passages per chunk of an owner, read when asked (a hit on an edge passage brings its
    #: neighbour); None: one each
    counts: Callable[[str], Mapping[int, int]] | None = None

    def size(self, i: int) -> int | None:
        """Tokens of chunk i, or None when it is not there to recall."""
        if not 0 <= i < self.chunks or i in self.gone:
            return None
        return min(self.block, self.tokens - i * self.block)

    def passages(self, i: int) -> int:
        return 1 if self.counts is None else self.counts(self.owner).get(i, 1)


class _Chunks(Mapping[int, int]):
    """A source's recallable chunks and their sizes, without listing them (a collection of
    10,000 files has ~100,000)."""

    def __init__(self, source: Source) -> None:
        self.source = source

    def __getitem__(self, i: int) -> int:
        n = self.source.size(i)
        if n is None:
            raise KeyError(i)
        return n

    def __contains__(self, i: object) -> bool:
        return isinstance(i, int) and self.source.size(i) is not None

    def __iter__(self) -> Iterator[int]:
        return (i for i in range(self.source.chunks) if i not in self.source.gone)

    def __len__(self) -> int:
        return self.source.chunks - len(self.source.gone)


@dataclass
class Request:
    """What one window must hold (see the module docstring)."""

    window: int
    head: int
    tail: int
    query: str
    mode: str
    history: list[Turn] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    fill: bool = False  # a question about the documents: fill the budget
    top_k: int = 0
    neighbors: int = 1
    order: str = ORDER
    quote: str = ""  # a QUOTES policy; '': QUOTE
    #: called with the turns that did not stay, before recall searches them (to index them)
    prepare: Callable[[list[Turn]], None] | None = None


@dataclass
class Quote:
    """A passage quoted before the question, and where it was said."""

    text: str
    owner: str
    chunk: int
    label: str  # the document's name, or "" for the conversation itself


@dataclass
class Plan:
    """The layout: recalled chunks (owner, index) in window order, the turns that stay, the
    quotes, and what recall did."""

    recalled: list[tuple[str, int]] = field(default_factory=list)
    kept: list[Turn] = field(default_factory=list)
    quotes: list[Quote] = field(default_factory=list)
    quote_room: int = 0
    hits: list[Hit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    recall_s: float = 0.0
    cut: int = 0  # blocks of the current message that did not stay (a message over its share)


def plan(recall: Recall, req: Request) -> Plan:
    """Lay out `req`'s window (see the module docstring)."""
    free = req.window - req.head - req.tail
    history = req.history
    if not req.sources and sum(t.n for t in history) <= free:
        return Plan(kept=list(history))  # the whole conversation fits: nothing to recall
    policy = req.quote or QUOTE
    room = QUOTE_ROOM if policy != "off" else 0
    sizes_h = [t.n for t in history]
    n = staying(sizes_h, req.window, req.head, req.tail, room > 0)
    current = sum(1 for t in history if t.current)  # the message being answered: last
    if n < current:  # it outgrows the recent share: it takes the window, recall what is left
        room = 0
        n = fit_recent(sizes_h[len(history) - current :], free)
    older, kept = history[: len(history) - n], history[len(history) - n :]
    out = Plan(kept=list(kept), cut=max(0, current - n))
    if req.prepare is not None and older:
        req.prepare(list(older))
    sizes = _sizes(req, older, out.notes)
    t0 = time.perf_counter()
    if sizes:  # a document with every chunk there needs no scope
        scope = {o: set(s) for o, s in sizes.items() if not isinstance(s, _Chunks) or s.source.gone}
        out.hits = recall.search(
            list(sizes), query_of(req.query), req.mode, limit=32, subject=req.fill, scope=scope
        )
    hits = [h for h in out.hits if sizes[h.owner].get(h.chunk) is not None]
    budget = free - room - sum(t.n for t in kept)
    chosen = _choose(req, hits, sizes, budget)
    if req.fill and room and not chosen:  # quotes never cost the last chunk's room
        room, chosen = 0, _choose(req, hits, sizes, budget + QUOTE_ROOM)
    if req.fill and not sizes:
        listed = ", ".join(f"'{s.name}'" for s in req.sources)
        raise NotFoundError(
            f"no chunk of {listed} is left in the store (evicted by the disk budget)",
            "Run `cascade ingest` on the file again: it recomputes the missing chunks.",
        )
    if req.fill and not chosen:
        raise ContextFullError(
            f"a {req.window}-token window has no room for a chunk after the prompt "
            f"({req.head} tokens), the question and the answer ({req.tail} tokens)",
            "Raise --gpu-cache-size or lower --max-tokens.",
        )
    out.recalled = _arrange(req, chosen)
    if room and not out.cut:  # never a quote inside the message being answered
        names = {s.owner: s.name for s in req.sources}
        for h, text in quote_texts(recall, hits, chosen, policy, req.mode, query_of(req.query)):
            out.quotes.append(Quote(text, h.owner, h.chunk, names.get(h.owner, "")))
        out.quote_room = room if out.quotes else 0
    out.recall_s = time.perf_counter() - t0
    return out


def quote_texts(
    recall: Recall,
    hits: Sequence[Hit],
    chosen: Sequence[tuple[str, int]],
    policy: str,
    mode: str,
    query: str,
) -> list[tuple[Hit, str]]:
    """The hits `policy` quotes among those paged in (`chosen`) and the text of each: its
    passage cut to QUOTE_WORDS words shared between the quotes, each distinct text once."""
    paged = set(chosen)
    quoted = to_quote(
        [h for h in hits if (h.owner, h.chunk) in paged], policy, recall.methods(mode)
    )
    out: list[tuple[Hit, str]] = []
    for h in quoted:
        held = {c for o, c in chosen if o == h.owner}
        text = recall.quote_text(h, query, QUOTE_WORDS // len(quoted), held)
        if text.strip() and all(text != t for _, t in out):  # one text, quoted once
            out.append((h, text))
    return out


def _sizes(req: Request, older: Sequence[Turn], notes: list[str]) -> dict[str, Mapping[int, int]]:
    """Every recallable chunk's size by owner: the documents' (evicted ones left out, with a
    note once per document) and the conversation's turns that did not stay."""
    out: dict[str, Mapping[int, int]] = {}
    for s in req.sources:
        if s.gone:
            notes.append(
                f"{len(s.gone)} chunk(s) of '{s.name}' were evicted by the disk budget and are "
                "skipped (ingest it again to bring them back)"
            )
        out[s.owner] = _Chunks(s)
    turns: dict[str, dict[int, int]] = {}
    for t in older:
        turns.setdefault(t.owner, {})[t.index] = t.n
    out.update(turns)
    return {o: d for o, d in out.items() if len(d)}


def _count(chunks: Mapping[int, int] | None) -> int:
    """One more than the last recallable chunk (what `fill` may reach)."""
    if isinstance(chunks, _Chunks):
        return chunks.source.chunks
    return max(chunks or {0: 0}) + 1


def _choose(
    req: Request, hits: Sequence[Hit], sizes: dict[str, Mapping[int, int]], budget: int
) -> list[tuple[str, int]]:
    """(owner, chunk) to recall, best first, within `budget` tokens."""
    frames = {s.owner: s.frame for s in req.sources}
    spent = 0
    chosen: list[tuple[str, int]] = []

    def cost(owner: str, chunk: int) -> int:
        first = all(o != owner for o, _ in chosen)
        return sizes[owner][chunk] + (frames.get(owner, 0) if first else 0)

    if req.fill:
        by_owner = {s.owner: s for s in req.sources}
        for owner, chunk in fill(
            hits,
            len(hits) + 2 * req.neighbors * len(hits),
            lambda o: _count(sizes.get(o)),
            lambda o, c: by_owner[o].passages(c) if o in by_owner else 1,
            max_hits=req.top_k,
            neighbors=req.neighbors,
        ):
            if chunk in sizes.get(owner, {}) and spent + cost(owner, chunk) <= budget:
                spent += cost(owner, chunk)
                chosen.append((owner, chunk))
        if not hits:  # nothing matched: the opening chunks
            for s in req.sources:
                for i in sorted(sizes.get(s.owner, {})):
                    if spent + cost(s.owner, i) <= budget:
                        spent += cost(s.owner, i)
                        chosen.append((s.owner, i))
        return chosen
    for h in hits:
        if h.score < MIN_SCORE:
            break  # fused order: the rest are weaker
        n = cost(h.owner, h.chunk)
        if spent + n <= budget:
            chosen.append((h.owner, h.chunk))
            spent += n
        if len(chosen) >= MAX_RECALLED:
            break
    return chosen


def arrange(best_first: list[int], order: str = ORDER) -> list[int]:
    """Window order of one source's chunks: runs of adjacent chunks stay together in document
    order; 'relevance' puts the run holding the best hit last (nearest the question),
    'document' sorts everything by position."""
    if order == "document":
        return sorted(best_first)
    rank = {c: i for i, c in enumerate(best_first)}
    runs: list[list[int]] = []
    for c in sorted(best_first):
        if runs and runs[-1][-1] == c - 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    runs.sort(key=lambda run: -min(rank[c] for c in run))
    return [c for run in runs for c in run]


def _arrange(req: Request, chosen: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Documents first (in the request's order), then the conversation's recalled turns; each
    owner's chunks in `req.order`."""
    owners = [s.owner for s in req.sources]
    owners += sorted({o for o, _ in chosen} - set(owners))
    out: list[tuple[str, int]] = []
    for o in owners:
        mine = [c for oo, c in chosen if oo == o]
        out += [(o, c) for c in arrange(mine, req.order)]
    return out
