"""Completions for API clients that resend the whole conversation on every request.

Each request is rendered into content-addressed blocks (render.py). Blocks the window already
holds stay (window hits), blocks the RAM or disk tier holds are restored at their new positions,
and only the rest — new blocks and the open end of the prompt — is decoded: across requests,
across conversations (a shared system prompt) and across restarts, since the blocks live in the
chunk store. A conversation longer than the window is laid out by the planner exactly as `cascade chat` lays
out a session (window/layout.py over recall/plan.py): the system prompt, the strongest recalled
older turns in a kept share of the window, then the newest turns; older blocks never seen before
are paged through (stored and indexed) by the same routine chat uses for a long message. After the reply, the finished turn is stored as the next
request will render it (the reply's text re-tokenized), so the follow-up finds all of it.

Not thread-safe: one llama.cpp context, one window. The server runs every request on one thread.
"""

from __future__ import annotations

import logging

from cascade_cli.documents import collection, locations
from cascade_cli.documents.catalog import Document
from cascade_cli.documents.library import Library
from cascade_cli.engine import Context
from cascade_cli.errors import ContextFullError, InputError, NotFoundError
from cascade_cli.prompts import block_index
from cascade_cli.prompts.blocks import Blocks
from cascade_cli.prompts.render import (
    Block,
    block_address,
    chain,
    cut,
    salted,
    segments,
)
from cascade_cli.prompts.reply import Replier, Run
from cascade_cli.prompts.types import Message, Params, Reply, Stop, never
from cascade_cli.recall.plan import QUOTE_ROOM, Turn, block_for, reserve
from cascade_cli.window.layout import lay_out
from cascade_cli.window.page import Page
from cascade_cli.window.pages import Pages
from cascade_cli.window.turns import template

log = logging.getLogger(__name__)

#: Tokens kept free for a reply when the request names no max_tokens.
#: Positions kept past the reply for re-decoding its tail as the client's text tokenizes.
FIX_ROOM = 8
#: Requests between two checks of the stored conversations against api_cache_budget (also
#: checked whenever the server goes idle). Every request: with 8, a 30-minute soak of four
#: clients peaked 8 % over its budget between checks; a check waits only for the previous
#: request's saves.
TRIM_EVERY = 1


class PromptService(Replier):
    """Serves chat and text completions from one context, reusing stored prompt blocks."""

    def __init__(
        self, ctx: Context, lib: Library, *, window: int | None = None, system: str | None = None
    ) -> None:
        self.ctx = ctx
        self.lib = lib
        self.model = ctx.model
        self.think = ctx.model.think  # the setting; a request may ask otherwise (Params.think)
        self.tpl = template(ctx.model)
        self.window = window or lib.settings.gpu_cache_size
        self.system = lib.settings.system if system is None else system
        lib.recall.check(lib.settings.recall)  # at start, not on the first long conversation
        self.pages = Pages(ctx, lib, self.window, stash=True)  # conversations take turns
        self.fingerprint = self.pages.fingerprint
        self.block = block_for(lib.settings.block_size, self.window)
        self.blocks = Blocks(lib, self.pages, lib.settings.api_cache_budget)
        self._since_trim = 0
        if lib.remote is not None:  # prompt blocks are shared through the remote tier
            lib.remote.register(block_index.PREFIX, self.blocks.address)

    # ---- requests --------------------------------------------------------------------------

    def chat(self, messages: list[Message], params: Params, stop: Stop = never) -> Reply:
        """Lay out and decode the conversation's prompt (`stop` is asked between blocks: true
        raises Cancelled); the reply streams from the result."""
        self._think(params.think)
        run = self._run(params, stop)
        run.documents = self._documents(params.documents)  # an unknown one: 400, window kept
        run.chat = True
        run.prefilled = bool(messages) and messages[-1].role == "assistant"
        finished, open_turn, question = segments(self.tpl, messages, self.system)
        blocks, tail = chain(
            run.fingerprint, finished, open_turn, self.block, self.model.detokenize
        )
        reserve = self._reserve(params)
        system = len(blocks[0].tokens)
        if system + len(tail) + reserve + QUOTE_ROOM > self.window:
            raise ContextFullError(
                f"the system prompt ({system} tokens) leaves no room for a message and a reply "
                f"in the {self.window}-token window",
                "Shorten the system prompt or lower max_tokens.",
            )
        pages = self.blocks.pages(blocks)
        opened = len(cut(open_turn, self.block)) - 1  # the open turn's full blocks (at the end)
        save = open_turn == self.tpl.user(question) if question else False
        try:
            self._lay_out(run, pages, blocks, len(tail), reserve, question, opened)
            return self._reply(run, tail, blocks, open_turn if save else None)
        except BaseException:
            self.pages.reset()  # cells no page accounts for must not outlive a failure
            raise

    def complete(self, prompt: str, params: Params, stop: Stop = never) -> Reply:
        """A raw text prompt (no chat template; special tokens in it are parsed, as llama.cpp's
        server does). Its full blocks are stored and reused; it must fit the window."""
        if params.documents:
            raise InputError(
                "documents are recalled for chat completions only",
                "Send the request to /v1/chat/completions.",
            )
        self._think(None)
        run = self._run(params, stop)
        tokens = self.model.tokenize(prompt, add_special=True, parse_special=True)
        if not tokens:
            raise InputError("the prompt is empty", "Send a non-empty prompt.")
        reserve = self._reserve(params)
        if len(tokens) + reserve > self.window:
            raise ContextFullError(
                f"the prompt is {len(tokens)} tokens; with {reserve} for the reply it does not fit "
                f"the {self.window}-token window",
                "Shorten the prompt or lower max_tokens (chat completions page long "
                "conversations).",
            )
        pieces = cut(tokens, self.block)
        tail = pieces.pop()
        blocks: list[Block] = []
        parent = "raw"
        for piece in pieces:
            parent = block_address(run.fingerprint, parent, piece)
            blocks.append(Block(parent, piece, "", 1))
        pages = self.blocks.pages(blocks, root=blocks[0].hash if blocks else "")
        run.prompt_tokens = len(tokens)
        try:
            self._apply(run, pages, len(tail) + reserve)
            return self._reply(run, tail, blocks, None)
        except BaseException:
            self.pages.reset()
            raise

    def _think(self, asked: bool | None) -> None:
        """Whether this request's reasoning model thinks first: its templates follow."""
        self.model.think = self.think if asked is None else asked
        self.tpl = template(self.model)

    # ---- layout ----------------------------------------------------------------------------

    def _run(self, params: Params, stop: Stop) -> Run:
        """A request's bookkeeping; the writer lock taken again (unless another process
        writes now)."""
        run = Run(params, stop)
        run.fingerprint = salted(self.fingerprint, params.salt)
        self.lib.disk.take_lock()
        if self._since_trim >= TRIM_EVERY:  # requests since the last check (idle checks too)
            self.trim()
        self._since_trim += 1
        return run

    def trim(self) -> None:
        """Keep the stored blocks within api_cache_budget (blocks.py)."""
        self._since_trim = 0
        self.blocks.trim()

    def _reserve(self, params: Params) -> int:
        """The planner's rule; the reply's closing tokens and FIX_ROOM come after it."""
        wanted = self.lib.settings.max_tokens if params.max_tokens is None else params.max_tokens
        return reserve(wanted, self.window, len(self.tpl.close()) + FIX_ROOM)

    def _apply(self, run: Run, target: list[Page], room: int) -> None:
        placed = self.pages.apply(target, room=room, stop=run.stop)
        run.decoded += placed.decoded

    def _lay_out(
        self,
        run: Run,
        pages: list[Page],
        blocks: list[Block],
        need: int,
        reserve: int,
        question: str,
        opened: int,
    ) -> None:
        """Lay the conversation out with the planner (window/layout.py): while it fits, all of
        it; else older blocks never seen are paged through (stored and indexed), the strongest
        recalled and the best passages quoted before the new message. A new message that does
        not fit its share of the window is refused (400 context_length_exceeded), never cut."""
        system, rest = pages[0], pages[1:]
        block_of = {p.key: b for p, b in zip(rest, blocks[1:], strict=True)}
        history = [
            (Turn(p.key, p.n, p.meta.owner, p.meta.index, i >= len(rest) - opened), p)
            for i, p in enumerate(rest)
            if p.meta is not None
        ]
        docs = run.documents
        by_owner = {d.owner: d for d in docs}

        def page_of(key: str) -> Page:
            meta = self.lib.disk.meta(key)
            return Page(key, meta.tokens.tolist(), None, doc=by_owner.get(meta.owner))

        laid = lay_out(
            self.lib, self.tpl, window=self.window, system=system, history=history,
            tail=need + reserve, query=question, documents=docs, page_of=page_of,
            prepare=lambda older: self.blocks.index(older, block_of),
        )  # fmt: skip
        if docs:
            quoted = [(q.owner, q.chunk, q.text) for q in laid.plan.quotes]
            with self.lib.disk.lock:
                run.result.sources = locations.cite(self.lib.conn, docs, laid.plan.recalled, quoted)
        if laid.plan.cut:
            size = sum(p.n for t, p in history if t.current) + need
            raise ContextFullError(
                f"the last message is {size} tokens; with {reserve} for the reply it does not "
                f"fit the {self.window}-token window beside the system prompt",
                "Shorten the message or lower max_tokens.",
            )
        kept = {t.key for t in laid.plan.kept}
        older = [p for t, p in history if t.key not in kept]
        if older:  # never seen (or evicted): decoded in a sliding window and stored
            self.pages.page_through(system, older, reserve, stop=run.stop)
        run.result.recall_s = laid.plan.recall_s
        run.result.recalled = list(laid.labels)
        placed = self.pages.apply(laid.pages, room=need + reserve, stop=run.stop)
        run.prompt_tokens = self.pages.used + need  # the note placed may be another (rerank)
        run.decoded += placed.decoded
        run.result.timings.rerank_ms = laid.rerank_s * 1000

    def _documents(self, refs: list[str]) -> list[Document]:
        """The documents a request names (a collection: its files), or a 400."""
        found: dict[int, Document] = {}
        for ref in refs:
            try:
                with self.lib.disk.lock:
                    docs = collection.documents_of(self.lib.conn, ref)
            except NotFoundError as exc:
                raise InputError(exc.message, "See `cascade docs` for what is ingested.") from None
            found.update((d.id, d) for d in docs)
        return list(found.values())

    def idle(self) -> None:
        """Between requests: finish saving, then let other processes (`cascade ingest`, `rm`)
        write the store until the next request takes the writer lock back."""
        self.lib.pager.flush()
        self.trim()
        self.lib.disk.yield_lock()

    def close(self) -> None:
        self.lib.pager.flush()
        self.lib.recall.flush()
