"""The stored side of the prompt service: blocks as pages (catalog rows), their recall index,
their remote addresses, and the API cache's budget.

Blocks are content-addressed (render.py) and numbered in the owner of the conversation's first
turn the first time they are seen; the store keeps their KV, recall indexes the finished turns
among them as they leave the window.
"""

from __future__ import annotations

import logging

import numpy as np

from cascade_cli.documents.library import Library
from cascade_cli.prompts import block_index, cache
from cascade_cli.prompts.render import Block
from cascade_cli.recall.plan import Turn
from cascade_cli.store import ChunkMeta
from cascade_cli.store.address import address
from cascade_cli.window.page import Page
from cascade_cli.window.pages import Pages

log = logging.getLogger("cascade_cli.prompts.completions")


class Blocks:
    """Stored prompt blocks of one server (one store, one window)."""

    def __init__(self, lib: Library, pages: Pages, budget: int) -> None:
        self.lib = lib
        self.window = pages
        self.cache_budget = budget

    def pages(self, blocks: list[Block], root: str | None = None) -> list[Page]:
        """Pages for the blocks, numbering blocks seen for the first time in their owner."""
        if not blocks:
            return []
        if root is None:  # a chat: the system prompt is its own root, the rest the first turn's
            root = blocks[1].hash if len(blocks) > 1 else blocks[0].hash
        owners = [block_index.owner_for(b.hash if b.turn == 0 else root) for b in blocks]
        with self.lib.disk.transaction() as conn:
            rows = block_index.lookup(conn, [b.hash for b in blocks])
            new = [(b.hash, o) for b, o in zip(blocks, owners, strict=True) if b.hash not in rows]
            rows.update(block_index.add(conn, new))
        scheme = self.lib.settings.compression
        pages = []
        for b in blocks:
            r = rows[b.hash]
            meta = ChunkMeta(
                key=r.key, owner=r.owner, index=r.idx, start=0, end=len(b.tokens),
                tokens=np.asarray(b.tokens, dtype=np.int32), scheme=scheme,
            )  # fmt: skip
            pages.append(Page(r.key, b.tokens, meta))
        return pages

    def index(self, turns: list[Turn], blocks: dict[str, Block]) -> None:
        """Index the finished turns among `turns` for recall (their `blocks` by key), once
        each: those that leave the window, before recall searches them."""
        done = {o: self.lib.recall.indexed(o) for o in {t.owner for t in turns}}
        for t in turns:
            text = blocks[t.key].text
            if text and t.index not in done[t.owner]:
                self.lib.recall.index(t.owner, t.index, text)

    def address(self, key: str, meta: ChunkMeta | None) -> str | None:
        """A stored block's remote address: its chain hash and the compression it is kept in."""
        owner, _, idx = key.rpartition(":")
        with self.lib.disk.lock:
            block = (
                block_index.hash_of(self.lib.disk.conn, owner, int(idx)) if idx.isdigit() else None
            )
        scheme = meta.scheme if meta is not None else self.lib.settings.compression
        return None if block is None else address("api", scheme, block)

    def trim(self) -> None:
        """Keep the stored blocks within api_cache_budget (prompts/cache.py), never dropping
        one the window holds."""
        if not self.cache_budget or self.lib.disk.mode != "write":
            return
        self.lib.pager.flush()  # nothing queued for a block about to go
        self.lib.recall.flush()  # nor embeddings for its passages
        self.lib.disk.flush()  # access times, for least recently used
        keep = {p.key for p in self.window.layout}
        if self.window.win.recurrent:  # no block states: no row is stale for want of one
            removed, freed = cache.trim_snapshots(self.lib.disk, self.cache_budget)
        else:
            removed, freed = cache.trim(self.lib.disk, self.cache_budget, keep)
        for key in removed:  # their exact states leave the RAM tier too
            self.lib.ram.pop(key)
        if removed:
            log.debug("api cache: %d block(s) removed, %d bytes freed", len(removed), freed)
