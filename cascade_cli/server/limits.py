"""Bounds on one request, so that no client can take unbounded time or memory: the body's
size and type (read here, before any parsing), the number of messages, the reply's max_tokens,
and how many requests may wait in the queue. Each is a setting (see config.Settings)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from cascade_cli.server.openai_errors import ApiError


@dataclass(frozen=True)
class Limits:
    """Defaults are config.Settings' (`max_body_size`, `max_messages`, `max_queue`,
    `max_reply_tokens`)."""

    max_body: int = 4 * 1024**2
    max_messages: int = 1024
    max_queue: int = 16
    max_reply_tokens: int = 4096


def _too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        f"The request body is larger than this server's limit of {limit} bytes "
        "(max_body_size); send a shorter conversation or raise --max-body-size.",
        code="request_too_large",
    )


def check_type(request: Request) -> None:
    """415 unless the body is declared JSON (a browser's text/plain "simple" POST is not)."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "application/json":
        raise ApiError(
            415,
            f"Content-Type must be application/json, got {kind or 'none'!r}; send the JSON "
            "body with `Content-Type: application/json`.",
            code="unsupported_media_type",
        )


async def read_body(request: Request, limit: int) -> bytes:
    """The body, read no further than `limit` bytes (413 past it, or at once when its declared
    Content-Length is over)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _too_large(limit)
    return bytes(body)


def queue_full(waiting: int, retry_s: int) -> ApiError:
    """429 with Retry-After: the queue holds as many requests as it may."""
    return ApiError(
        429,
        f"The server is busy ({waiting} requests waiting, the max_queue limit); retry in "
        f"{retry_s} s.",
        type="server_error",
        code="queue_full",
        headers={"Retry-After": str(retry_s)},
    )
