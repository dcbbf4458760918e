"""The reply half of the prompt service: decode the prompt's open end, stream the generation,
then keep the finished turn in the window and the store as the next request will render it.

A base of PromptService (service.py), which lays the prompt out; split off so that each stays
one responsibility.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

from cascade_cli.documents.catalog import Document
from cascade_cli.documents.library import Library
from cascade_cli.engine import Context, Sampler, SamplerSettings
from cascade_cli.engine.generate import Generation, generate
from cascade_cli.engine.live import WINDOW_SEQ
from cascade_cli.engine.reasoning import Thought
from cascade_cli.errors import ContextFullError
from cascade_cli.prompts.blocks import Blocks
from cascade_cli.prompts.render import Block, finished_turn
from cascade_cli.prompts.stops import StopScanner
from cascade_cli.prompts.types import Params, Reply, Result, Stop
from cascade_cli.window.pages import Pages
from cascade_cli.window.turns import Template

log = logging.getLogger("cascade_cli.prompts.completions")


class Run:
    """One request's bookkeeping."""

    def __init__(self, params: Params, stop: Stop) -> None:
        self.t0 = time.perf_counter()
        self.params = params
        self.stop = stop
        self.result = Result()
        self.decoded = 0  # prompt tokens decoded (recomputed blocks and the tail)
        self.prompt_tokens = 0
        self.fingerprint = ""  # the model's, salted with the request's cache_salt
        self.chat = False  # a chat completion (a reasoning model's thinking is split off)
        self.prefilled = False  # its last message is the assistant's: the reply continues it
        self.documents: list[Document] = []  # the ones it may recall from (Params.documents)


class Replier:
    """Streams replies in the window laid out by the subclass."""

    ctx: Context
    lib: Library
    tpl: Template
    window: int
    block: int
    pages: Pages
    blocks: Blocks

    def _reply(
        self,
        run: Run,
        tail: list[int],
        blocks: list[Block],
        turn: list[int] | None,
    ) -> Reply:
        """Decode the tail, then stream; the finished turn is stored when `turn` is given."""
        win = self.pages.win
        start = win.end
        win.append(tail, logits="last")
        win.mark()  # a recurrent model goes back here when the reply is re-tokenized
        run.decoded += len(tail)
        timings = run.result.timings
        timings.count(run.prompt_tokens, run.decoded)
        timings.prompt_ms = (time.perf_counter() - run.t0) * 1000
        cancel = threading.Event()
        return Reply(self._stream(run, start, tail, blocks, turn, cancel), run.result, cancel)

    def _stream(
        self,
        run: Run,
        start: int,
        tail: list[int],
        blocks: list[Block],
        turn: list[int] | None,
        cancel: threading.Event,
    ) -> Iterator[str]:
        p = run.params
        close = len(self.tpl.close()) if turn is not None else 0
        reply_at = start + len(tail)
        free = self.window - self.pages.used - len(tail)
        limit = min(self.pages.win.limit, reply_at + free) - close - 8
        gen = Generation(pos=reply_at)
        cfg = self.lib.settings
        sampler = Sampler(
            SamplerSettings(
                temperature=cfg.temperature if p.temperature is None else p.temperature,
                top_k=cfg.top_k, top_p=cfg.top_p if p.top_p is None else p.top_p,
                repeat_penalty=cfg.repeat_penalty,
                seed=0xFFFFFFFF if p.seed is None else p.seed & 0xFFFFFFFF,
                guard=self.lib.settings.repeat_guard,
            ),
            self.ctx.model,
        )  # fmt: skip
        scan = StopScanner(p.stop)
        out: list[str] = []
        t_first = 0.0
        cut_short = False
        budget = p.max_tokens if p.max_tokens is not None else self.window
        pieces = generate(
            self.ctx, sampler, WINDOW_SEQ, gen, budget, limit, run.chat, run.prefilled
        )
        try:
            for piece in pieces:
                if not t_first:
                    t_first = time.perf_counter()
                    run.result.ttft_s = t_first - run.t0
                if isinstance(piece, Thought):  # reasoning: streamed apart, never kept
                    yield piece
                    if cancel.is_set():
                        cut_short = True
                        break
                    continue
                text = scan.push(piece)
                if text:
                    out.append(text)
                    yield text
                if scan.stopped or cancel.is_set():
                    cut_short = not scan.stopped
                    break
            else:
                text = scan.flush()
                if text:
                    out.append(text)
                    yield text
        except BaseException:
            cut_short = True  # the client went away (GeneratorExit), or decoding failed
            raise
        finally:
            pieces.close()  # a reply cut short keeps only the tokens of the text given
            sampler.close()
            end = time.perf_counter()
            t = run.result.timings
            t.predicted_n = len(gen.tokens)
            t.predicted_ms = (end - t_first) * 1000 if t_first else 0.0
            stopped = scan.stopped or gen.stopped_by in ("eog", "loop")  # the guard ended it
            run.result.finish_reason = "stop" if stopped else "length"
            run.result.cancelled = cut_short
            decoded = gen.tokens[: gen.pos - reply_at]
            self.pages.win.advance(decoded)
            try:
                if turn is not None and not cut_short:
                    text = "".join(out)
                    self._keep_turn(run, blocks, turn, start, reply_at, decoded, text)
                else:
                    self.pages.rewind()
            except Exception as exc:  # the reply was given; only its storing failed
                log.warning("the turn was not stored: %s", exc)
                self.pages.reset()
            self._count(run)

    # ---- after the reply ---------------------------------------------------------------------

    def _keep_turn(
        self,
        run: Run,
        blocks: list[Block],
        turn: list[int],
        start: int,
        reply_at: int,
        decoded: list[int],
        text: str,
    ) -> None:
        """Make the window hold the turn as the next request renders it, and store its blocks:
        the reply re-tokenized from the text the client got (tokens past the first difference
        are decoded again), then the template's closing tokens."""
        canon = self.tpl.reply(text)
        same = 0
        while same < min(len(canon), len(decoded)) and canon[same] == decoded[same]:
            same += 1
        self.pages.win.truncate(reply_at + same)
        close = self.tpl.close()
        try:
            self.pages.win.append(canon[same:] + close)
        except ContextFullError:
            self.pages.rewind()
            return
        new = finished_turn(self.tpl, run.fingerprint, blocks, turn, canon, text, self.block)
        pages = self.blocks.pages(new, root=blocks[1].hash if len(blocks) > 1 else new[0].hash)
        for page in pages:
            self.pages.append(page, start)
            start += page.n

    def _count(self, run: Run) -> None:
        t = run.result.timings
        stats = self.lib.disk.stats
        stats.add("server", "requests")
        stats.add("server", "cached_tokens", t.cache_n)
        stats.add("server", "prompt_tokens", t.prompt_n)
        stats.add("server", "generated_tokens", t.predicted_n)
        if run.result.ttft_s:
            stats.observe("server_ttft", run.result.ttft_s)
