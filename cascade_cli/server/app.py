"""The FastAPI app: routes, API-key check, errors in OpenAI's shape, SSE streaming."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException

from cascade_cli.engine.reasoning import Thought
from cascade_cli.errors import Cancelled, CascadeError
from cascade_cli.prompts.types import Result
from cascade_cli.server import validate
from cascade_cli.server.limits import Limits, check_type, queue_full, read_body
from cascade_cli.server.openai_errors import ApiError, from_cascade, internal
from cascade_cli.server.policy import Guard, Policy
from cascade_cli.server.responses import Shape, now, sse
from cascade_cli.server.worker import Engine, Job, Worker

log = logging.getLogger("cascade.serve")

#: How often a waiting non-streamed request checks that its client is still there.
POLL_S = 0.25


def _error_of(exc: BaseException, chat: bool = True) -> ApiError:
    """An engine-side exception as the error the client gets (internals only in the log)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, Cancelled):
        return stopping()
    if isinstance(exc, CascadeError):
        return from_cascade(exc, "messages" if chat else "prompt")
    log.error("internal error: %s: %s", type(exc).__name__, exc)
    return internal()


def stopping() -> ApiError:
    """503: the request was dropped, or its reply cut short, because the server is stopping."""
    return ApiError(
        503,
        "The server is stopping; the request was not completed. Retry later.",
        type="server_error",
        code="unavailable",
    )


class Api:
    """Route handlers bound to one worker and one served model."""

    def __init__(
        self, worker: Worker, model: str, api_key: str | None, limits: Limits | None = None
    ) -> None:
        self.worker = worker
        self.model = model
        self.api_key = api_key.strip() if api_key is not None else None
        self.limits = limits or Limits()
        self.jobs: set[Job] = set()

    def stop_all(self) -> None:
        """End every open request (the server is stopping): queued ones are dropped, one still
        decoding its prompt stops at the next block, a reply stops at the next token; each is
        told 503 (a stream in an error event), never a finished reply."""
        for job in list(self.jobs):
            job.cancel()

    def check_key(self, request: Request) -> None:
        """401 unless the request carries ``Authorization: Bearer KEY`` (when a key is set)."""
        if self.api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), self.api_key.encode()
        ):
            raise ApiError(
                401,
                "Incorrect or missing API key. Send it as `Authorization: Bearer KEY` (the key "
                "given to `cascade serve --api-key`).",
                code="invalid_api_key",
            )

    def models(self) -> dict[str, Any]:
        card = {"id": self.model, "object": "model", "created": now(), "owned_by": "cascade"}
        return {"object": "list", "data": [card]}

    async def completion(self, request: Request, chat: bool) -> Response:
        check_type(request)
        raw = await read_body(request, self.limits.max_body)
        req = await asyncio.to_thread(validate.parse, raw, chat, self.model, self.limits)
        del raw
        messages, prompt, params = req.messages, req.prompt or "", req.params

        def run(engine: Engine) -> Any:
            stop = job.cancelled.is_set  # checked between the prompt's blocks
            if chat:
                return engine.chat(messages, params, stop)
            return engine.complete(prompt, params, stop)

        if not self.worker.alive:
            raise ApiError(
                503, "The generation thread stopped; restart the server.", type="server_error"
            )
        if self.worker.queued() >= self.limits.max_queue:
            raise queue_full(self.worker.queued(), self.worker.retry_after())
        job = Job(run, asyncio.get_running_loop())
        self.jobs.add(job)
        self.worker.submit(job)
        shape = Shape(chat, self.model)
        watcher = asyncio.create_task(self._watch(request, job))
        streaming = False
        try:
            kind, value = await job.events.get()
            if kind == "error":
                raise _error_of(value, chat)
            if req.stream:
                streaming = True
                return StreamingResponse(
                    self._stream(job, shape, req.include_usage),
                    media_type="text/event-stream",
                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                    # also when the stream never started (the client left first)
                    background=BackgroundTask(self._release, job),
                )
            pieces, result = await self._collect(job, chat)
            thought = "".join(p for p in pieces if isinstance(p, Thought)).strip()
            answer = "".join(p for p in pieces if not isinstance(p, Thought))
            return JSONResponse(shape.whole(answer, result, thought))
        except BaseException:
            job.cancel()
            raise
        finally:
            watcher.cancel()
            if not streaming:
                self.jobs.discard(job)

    def _release(self, job: Job) -> None:
        """A streamed response is over: stop its generation if it still runs."""
        self.jobs.discard(job)
        job.cancel()

    @staticmethod
    async def _watch(request: Request, job: Job) -> None:
        """Cancel the job when its client disconnects (until the response starts; a stream
        then watches its connection itself)."""
        while not job.cancelled.is_set():
            await asyncio.sleep(POLL_S)
            if await request.is_disconnected():
                job.cancel()
                return

    async def _collect(self, job: Job, chat: bool) -> tuple[list[str], Result]:
        pieces: list[str] = []
        while True:
            kind, value = await job.events.get()
            if kind == "piece":
                pieces.append(value)
            elif kind == "done":
                if value.cancelled:
                    raise stopping()
                return pieces, value
            else:
                raise _error_of(value, chat)

    async def _stream(self, job: Job, shape: Shape, include_usage: bool) -> AsyncIterator[bytes]:
        """SSE events: the role, the text pieces, the finish (with timings), usage if asked,
        then [DONE]. Leaving early (the client disconnected) stops the generation."""
        finished = False
        try:
            yield sse(shape.chunk("" if shape.chat else None, role=True))
            while True:
                kind, value = await job.events.get()
                if kind == "piece":
                    yield sse(shape.chunk(value))
                elif kind == "done" and value.cancelled:  # cut short: not a finished reply
                    finished = True
                    yield sse(stopping().body())
                    return
                elif kind == "done":
                    result: Result = value
                    last = shape.chunk(None, finish=result.finish_reason)
                    last["timings"] = shape.usage_chunk(result)["timings"]
                    if result.sources:  # cascade's: where the documents' excerpts came from
                        last["sources"] = result.sources
                    yield sse(last)
                    if include_usage:
                        yield sse(shape.usage_chunk(result))
                    yield sse("[DONE]")
                    finished = True
                    return
                else:
                    finished = True
                    yield sse(_error_of(value, shape.chat).body())
                    return
        finally:
            self.jobs.discard(job)
            if not finished:
                job.cancel()


def guard(
    handler: Callable[..., Awaitable[Any]],
) -> Callable[..., Awaitable[Any]]:
    """Turn ApiError into its response and anything unexpected into a logged 500."""

    async def wrapped(request: Request) -> Any:
        try:
            return await handler(request)
        except ApiError as exc:
            return exc.response()
        except Exception as exc:
            log.error("internal error on %s: %s: %s", request.url.path, type(exc).__name__, exc)
            return internal().response()

    return wrapped


def create_app(
    worker: Worker,
    model: str,
    api_key: str | None = None,
    limits: Limits | None = None,
    policy: Policy | None = None,
) -> FastAPI:
    """The ASGI app serving ``model`` through ``worker`` (started by the caller)."""
    api = Api(worker, model, api_key, limits)
    app = FastAPI(title="cascade", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.api = api
    app.add_middleware(Guard, policy=policy or Policy())

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        code = "not_found" if exc.status_code == 404 else None
        message = str(exc.detail)
        if exc.status_code == 404:
            message = f"Unknown route {request.method} {request.url.path}."
        elif exc.status_code == 405:
            message = f"Method {request.method} is not allowed on {request.url.path}."
        kind = "invalid_request_error"
        return ApiError(exc.status_code, message, type=kind, code=code).response()

    async def health(request: Request) -> Any:
        api.check_key(request)
        if not worker.alive:
            raise ApiError(503, "The generation thread stopped.", type="server_error")
        return {"status": "ok", "model": model}

    async def models(request: Request) -> Any:
        api.check_key(request)
        return api.models()

    async def model_card(request: Request) -> Any:
        api.check_key(request)
        name = request.path_params["name"]
        if name != model:
            raise ApiError(
                404, f"The model `{name}` does not exist.", param="model", code="model_not_found"
            )
        return api.models()["data"][0]

    async def chat(request: Request) -> Response:
        api.check_key(request)
        return await api.completion(request, chat=True)

    async def completions(request: Request) -> Response:
        api.check_key(request)
        return await api.completion(request, chat=False)

    app.add_api_route("/health", guard(health), methods=["GET"])
    app.add_api_route("/v1/models", guard(models), methods=["GET"])
    app.add_api_route("/v1/models/{name:path}", guard(model_card), methods=["GET"])
    app.add_api_route("/v1/chat/completions", guard(chat), methods=["POST"])
    app.add_api_route("/v1/completions", guard(completions), methods=["POST"])
    return app
