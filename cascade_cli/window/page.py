"""A page of the window (a stored chunk, a frame, a quote, a message) and what placing some did."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cascade_cli.documents import catalog
from cascade_cli.store import ChunkMeta

if TYPE_CHECKING:
    from cascade_cli.engine.live import Window


@dataclass
class Page:
    """A chunk that can sit in the window: its store key, token ids, and the record to save
    it under when it has to be recomputed (None: never saved from here, e.g. a document's)."""

    key: str
    tokens: list[int] = field(repr=False)
    meta: ChunkMeta | None = field(default=None, repr=False)
    transient: bool = False  # made afresh wherever it is placed, never kept (a quote)
    stored: bool = True  # False: decoded where it is placed, never in a store (a frame)
    #: (page key, offset, to, n): tokens[to : to + n] are that page's tokens[offset : offset + n],
    #: whose cells the window copies (moved) while the page is placed, instead of decoding them
    copy: tuple[str, int, int, int] | None = None
    #: a transient page that may give way, when it is placed last, to another made for the
    #: window as it then is (window, page starts, most tokens); window/layout's rerank
    choose: Callable[[Window, Mapping[str, int], int], Page] | None = field(
        default=None, repr=False, compare=False
    )
    #: the document this page is a chunk of: damaged, it is recomputed in its ingest context
    doc: catalog.Document | None = field(default=None, repr=False, compare=False)
    #: a recurrent model: the store key of the whole state after every page up to this one
    #: (a sink's, and a document's first chunk's right after its sink: what ingest stored)
    whole: str | None = field(default=None, compare=False)

    @property
    def n(self) -> int:
        return len(self.tokens)

    @property
    def looked_up(self) -> bool:
        """Whether a store may hold it (a quote or a frame is made where it is placed)."""
        return self.stored and not self.transient


@dataclass
class Placed:
    """What one layout change did."""

    kept: int = 0
    dropped: int = 0
    moved: bool = False  # cells after a chunk moved (a K-shift follows)
    tiers: Counter[str] = field(default_factory=Counter)  # ram / disk / recomputed
    recomputed_tokens: int = 0
    decoded: int = 0  # tokens decoded to place pages: recomputed ones, quotes and frames
    seconds: float = 0.0
    #: where each page of the layout came from: window (kept), ram, disk, remote, recomputed,
    #: copied, prefill
    by_key: dict[str, str] = field(default_factory=dict)
