"""One thread runs every generation, first come first served.

The engine (one llama.cpp context, its window and the store's connection) is not thread-safe,
so the worker thread opens it, runs each request's prompt decode and generation in turn, and
closes it. Async endpoints submit a Job and await its events on an asyncio queue that the
worker feeds with ``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Protocol

from cascade_cli.errors import Cancelled
from cascade_cli.prompts.types import Message, Params, Reply, Result, Stop, never

log = logging.getLogger("cascade.serve")


class Engine(Protocol):
    """What the worker needs from the prompt service."""

    def chat(self, messages: list[Message], params: Params, stop: Stop = never) -> Reply: ...

    def complete(self, prompt: str, params: Params, stop: Stop = never) -> Reply: ...


@dataclass
class Backend:
    """An opened engine and a hook told of every finished request (for the store's stats):
    ``record(result, error)`` gets the result (None when the request failed before it had one)
    and whether it failed."""

    engine: Engine
    record: Callable[[Result | None, bool], None] = lambda result, failed: None
    idle: Callable[[], None] = lambda: None  # no request waiting (the store's lock is let go)


#: Events a job sends its endpoint: ("started", None) once the prompt is decoded,
#: ("piece", str) per text piece, then ("done", Result) or ("error", Exception).
Event = tuple[str, Any]


@dataclass(eq=False)  # hashed by identity: the app keeps a set of open jobs
class Job:
    """One request waiting for, or running on, the worker."""

    run: Callable[[Engine], Reply]
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    reply: Reply | None = None
    queued_at: float = field(default_factory=time.monotonic)

    def post(self, kind: str, value: Any = None) -> None:
        """Hand an event to the endpoint's event loop (from the worker thread)."""
        with contextlib.suppress(RuntimeError):  # a closed loop: the server is shutting down
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))

    def cancel(self) -> None:
        """Stop this job: skipped if still queued, generation stopped at the next token if
        running (from any thread)."""
        self.cancelled.set()
        reply = self.reply
        if reply is not None:
            reply.cancel.set()


class Worker:
    """The generation thread. ``open_backend(stack)`` runs on it and opens the engine with
    ``stack`` owning what must be closed (in reverse order) when the worker stops."""

    def __init__(self, open_backend: Callable[[ExitStack], Backend]) -> None:
        self._open = open_backend
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="cascade-generate", daemon=True)
        self.mean_s = 1.0  # a running mean of the seconds one request takes (for Retry-After)

    def start(self) -> None:
        """Start the thread and wait until the engine is open; re-raise what opening raised."""
        self._thread.start()
        while not self._ready.wait(0.1):
            if not self._thread.is_alive():
                break
        if self._failure is not None:
            raise self._failure

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self._failure is None

    def queued(self) -> int:
        """Requests waiting (not counting the one running)."""
        return self._jobs.qsize()

    def submit(self, job: Job) -> None:
        self._jobs.put(job)
        log.debug("request queued (%d waiting)", self._jobs.qsize())

    def retry_after(self) -> int:
        """Seconds until the queue has likely moved on by one request (1 to 60)."""
        return max(1, min(60, math.ceil(self.mean_s * (self.queued() + 1))))

    def stop(self, timeout: float | None = None) -> None:
        """Finish the running job, drop queued ones, close the engine."""
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel()
                job.post("error", Cancelled("the server is stopping"))
        self._jobs.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout)

    # -- the thread --------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            with ExitStack() as stack:
                backend = self._open(stack)
                self._ready.set()
                self._idle(backend)  # nothing asked yet: other processes may write meanwhile
                while (job := self._jobs.get()) is not None:
                    started = time.monotonic()
                    try:
                        self._run(backend, job)
                    finally:
                        took = time.monotonic() - started
                        self.mean_s = 0.8 * self.mean_s + 0.2 * took
                        log.debug("request ended after %.2f s", took)
                    if self._jobs.empty():
                        self._idle(backend)
        except BaseException as exc:  # opening (or closing) the engine failed
            if not self._ready.is_set():
                self._failure = exc
            else:
                log.error("the generation thread stopped: %s: %s", type(exc).__name__, exc)
                self._failure = exc
        finally:
            self._ready.set()

    @staticmethod
    def _idle(backend: Backend) -> None:
        try:
            backend.idle()
        except Exception as exc:  # the next request takes the lock back
            log.warning("could not hand the store over: %s", exc)

    @staticmethod
    def _record(backend: Backend, result: Result | None, failed: bool) -> None:
        try:
            backend.record(result, failed)
        except Exception as exc:  # counting must never stop the worker
            log.warning("could not record a request: %s", exc)

    def _run(self, backend: Backend, job: Job) -> None:
        if job.cancelled.is_set():  # the client went away while queued, or the server stops
            job.post("error", Cancelled("the request was cancelled before it ran"))
            return
        try:
            reply = job.run(backend.engine)
        except Cancelled as exc:  # the client left while its prompt was decoded: no error
            job.post("error", exc)
            return
        except Exception as exc:
            self._record(backend, None, True)
            job.post("error", exc)
            return
        job.reply = reply
        if job.cancelled.is_set():
            reply.cancel.set()
        log.debug("request replying")
        job.post("started")
        try:
            for piece in reply:
                job.post("piece", piece)
        except Exception as exc:
            self._record(backend, reply.result, True)
            job.post("error", exc)
            return
        self._record(backend, reply.result, False)
        job.post("done", reply.result)
