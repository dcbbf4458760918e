"""A chat session's state in one place: its row, its chunks, the documents it reads, the window's
pages — and what the rest of the session layer asks of it (pages for keys, sizes, settings).

ChatSession (chat.py) adds the turns; opening (restore.py) and the layout (layout.py) work on this
state through its methods, never on a ChatSession.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cascade_cli.config import Settings
from cascade_cli.documents import catalog as docs
from cascade_cli.documents.library import Library
from cascade_cli.engine import Context, SamplerSettings
from cascade_cli.errors import InputError
from cascade_cli.recall import Recall
from cascade_cli.recall.plan import Turn, block_for, reserve
from cascade_cli.session import transcripts
from cascade_cli.session.transcripts import Session
from cascade_cli.store import ChunkMeta
from cascade_cli.window.page import Page, Placed
from cascade_cli.window.pages import Pages
from cascade_cli.window.turns import template


def defaults(cfg: Settings) -> dict[str, Any]:
    """A session's settings where neither it nor this run's flags say otherwise (config.py)."""
    return {
        "system": cfg.system, "temperature": cfg.temperature, "top_k": cfg.top_k,
        "top_p": cfg.top_p, "repeat_penalty": cfg.repeat_penalty, "seed": None,
        "max_tokens": cfg.max_tokens,
    }  # fmt: skip


@dataclass
class Totals:
    """This process's counters for the session (what /stats prints)."""

    tiers: Counter[str] = field(default_factory=Counter)  # window / ram / disk / recomputed
    restore_s: float = 0.0
    restored_tokens: int = 0
    prefill_s: float = 0.0
    prefill_tokens: int = 0
    gen_s: float = 0.0
    gen_tokens: int = 0
    turns: int = 0


class SessionState:
    """One open session's state: its row, chunks, documents and the window's pages."""

    def __init__(
        self,
        ctx: Context,
        lib: Library,
        name: str,
        *,
        overrides: dict[str, Any] | None = None,
        window: int | None = None,
        documents: list[docs.Document] | None = None,
        notify: Callable[[str], None] = lambda _: None,
        create: bool = True,
    ) -> None:
        self.ctx = ctx
        self.lib = lib
        self.model = ctx.model
        self.tpl = template(ctx.model)
        self.window = window or lib.settings.gpu_cache_size
        self.notify = notify
        self.docs = documents or []
        self.doc_of = {d.owner: d for d in self.docs}
        self.recall: Recall = lib.recall
        self.pages = Pages(ctx, lib, self.window)
        self.totals = Totals()
        self.created = False
        name = transcripts.check_name(name)
        fp = ctx.fingerprint()
        for doc in self.docs:
            self.check_doc(doc, fp)
        with lib.disk.transaction() as conn:
            row = transcripts.find(conn, name)
            if row is None:
                if not create:
                    raise InputError(f"no chat session named {name!r}", "See `cascade sessions`.")
                # the system prompt is kept (chunk 0 is its KV); sampling follows the settings
                settings = {"system": lib.settings.system, **(overrides or {})}
                row = transcripts.create(
                    conn, name, self.model.path.name, fp, lib.settings.compression, settings
                )
                self.created = True
            elif overrides:
                row.settings = {**row.settings, **overrides}
                transcripts.update(conn, row)
            self.s: Session = row
            self.chunks = {c.idx: c for c in transcripts.chunks(conn, row)}
        self.opened()

    def opened(self) -> None:
        """Called once the state is loaded (ChatSession restores its window here)."""

    # ---- settings ---------------------------------------------------------------------------

    @property
    def settings(self) -> dict[str, Any]:
        return {**defaults(self.lib.settings), **self.s.settings}

    @property
    def sampling(self) -> SamplerSettings:
        st = self.settings
        return SamplerSettings(
            temperature=float(st["temperature"]),
            top_k=int(st["top_k"]),
            top_p=float(st["top_p"]),
            seed=0xFFFFFFFF if st["seed"] is None else int(st["seed"]),
            repeat_penalty=float(st["repeat_penalty"]),
            guard=self.lib.settings.repeat_guard,
        )

    @property
    def max_tokens(self) -> int:
        return int(self.settings["max_tokens"])

    @property
    def block(self) -> int:
        """Most tokens in one chunk: --block-size, or less so that any chunk can be recalled."""
        return block_for(self.lib.settings.block_size, self.window)

    def split(self, tokens: list[int]) -> list[list[int]]:
        return [tokens[o : o + self.block] for o in range(0, len(tokens), self.block)]

    @property
    def reserve(self) -> int:
        """Window kept free for the reply and its closing tokens."""
        return reserve(self.max_tokens, self.window, len(self.tpl.close()))

    def check_doc(self, doc: docs.Document, fp: str) -> None:
        keys = self.lib.disk.chunks(doc.owner)
        if keys and keys[0].fingerprint != fp:
            raise InputError(
                f"document {doc.name!r} was ingested with another model",
                f"Chat with the model it was ingested with, or `cascade ingest {doc.path}` again.",
            )

    # ---- pages --------------------------------------------------------------------------------

    def idx_of(self, key: str) -> int:
        owner, _, idx = key.rpartition(":")
        return int(idx) if owner == self.s.owner else -1

    def page(self, key: str) -> Page:
        idx = self.idx_of(key)
        if idx >= 0:
            c = self.chunks[idx]
            meta = ChunkMeta(
                key=key, owner=self.s.owner, index=idx, start=0, end=len(c.tokens),
                tokens=np.asarray(c.tokens, dtype=np.int32), scheme=self.s.scheme, pinned=True,
            )  # fmt: skip
            return Page(key, c.tokens, meta)
        meta = self.lib.disk.meta(key)  # a document's chunk: recomputed where ingest made it
        doc = self.doc_of.get(key.rpartition(":")[0])
        return Page(key, meta.tokens.tolist(), None, doc=doc)

    def count(self, placed: Placed) -> None:
        self.totals.tiers["window"] += placed.kept
        self.totals.tiers.update(placed.tiers)

    def pieces(self) -> list[tuple[Turn, Page]]:
        """The conversation's pieces after the system prompt, oldest first, with their pages
        (a long message's stored blocks are `current`)."""
        return [
            (Turn(self.s.key(i), len(c.tokens), self.s.owner, i, c.turn > self.s.turns),
             self.page(self.s.key(i)))
            for i, c in sorted(self.chunks.items())
            if i
        ]  # fmt: skip

    def labels(self) -> dict[str, str]:
        """How a recalled piece is named ("turn 3")."""
        return {self.s.key(i): f"turn {c.turn}" for i, c in self.chunks.items() if i}
