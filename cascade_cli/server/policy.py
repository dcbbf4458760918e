"""Which web pages and host names may talk to the server (as ollama checks them).

A browser lets any page POST a "simple" request (text/plain, no preflight) to a loopback port,
and with DNS rebinding a page on ``evil.example`` can even read the reply (its host name now
points at 127.0.0.1). So every request is checked before it reaches a route:

* ``Origin`` (sent by browsers): loopback origins (``http(s)://localhost``, ``127.0.0.1``,
  ``[::1]``, ``0.0.0.0``, any port) are allowed, plus ``allow_origins`` (exact, or with ``*``
  standing for any part); any other origin is 403 and gets no CORS headers.
* ``Host``: when the server listens on a loopback address, the name the request was sent to must
  be a loopback address, ``localhost`` (or ``*.localhost``) or this machine's name; a rebound
  name is 403. A server listening on other interfaces is meant to be reached by other names.

Allowed cross-origin requests get CORS headers, and their preflights (OPTIONS) are answered here.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import re
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]", "0.0.0.0")
#: Request headers an allowed origin's preflight is always granted; the headers it asks for are
#: granted too (browsers take exact names only: the OpenAI SDK's x-stainless-os, -lang, …).
ALLOW_HEADERS = "Authorization, Content-Type, OpenAI-Organization, OpenAI-Project"
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")
ALLOW_METHODS = "GET, POST, OPTIONS"


def _glob(pattern: str) -> str:
    """An allowed-origin pattern for fnmatch: `*` is its only wildcard, `[` and `?` are literal
    (an IPv6 origin: http://[fd00::5]:3000)."""
    return "".join("[[]" if c == "[" else "[?]" if c == "?" else c for c in pattern.lower())


def _split_host(host: str) -> str:
    """``name[:port]`` or ``[v6]:port`` without the port, lower case, brackets kept off."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    if host.count(":") == 1:
        return host.rsplit(":", 1)[0]
    return host


@dataclass(frozen=True)
class Policy:
    """The origins allowed beside loopback ones, and whether Host names are checked."""

    allow_origins: tuple[str, ...] = ()
    check_host: bool = True

    def origin_allowed(self, origin: str) -> bool:
        origin = origin.strip().lower().rstrip("/")
        scheme, sep, rest = origin.partition("://")
        if sep and scheme in ("http", "https"):
            host = rest if rest.endswith("]") else rest.rsplit(":", 1)[0]
            if host in LOOPBACK_HOSTS:
                return True
        return any(fnmatch.fnmatchcase(origin, _glob(p)) for p in self.allow_origins)

    def host_allowed(self, host: str) -> bool:
        if not self.check_host or not host:
            return True
        name = _split_host(host)
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            pass
        else:
            return address.is_loopback or address.is_unspecified
        if name == "localhost" or name.endswith(".localhost"):
            return True
        return name == socket.gethostname().lower()


def _error(status: int, message: str, code: str) -> tuple[int, bytes]:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None}}
    body["error"]["code"] = code
    return status, json.dumps(body).encode()


class Guard:
    """ASGI middleware applying a Policy to every HTTP request."""

    def __init__(self, app: App, policy: Policy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        origin = headers.get("origin")
        if not self.policy.host_allowed(host):
            status, body = _error(
                403,
                f"Host {host!r} is not this server's name; send requests to 127.0.0.1 or "
                "localhost (a web page's rebound host name is refused).",
                "host_not_allowed",
            )
            await _respond(send, status, body, [])
            return
        if origin is not None and not self.policy.origin_allowed(origin):
            status, body = _error(
                403,
                f"Origin {origin!r} may not use this server; start it with "
                f"--allow-origin {origin} to let that page in.",
                "origin_not_allowed",
            )
            await _respond(send, status, body, [])
            return
        if origin is None:
            await self.app(scope, receive, send)
            return
        cors = [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"vary", b"Origin"),
        ]
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            extra = [
                (b"access-control-allow-methods", ALLOW_METHODS.encode()),
                (b"access-control-allow-headers", _allow_headers(headers).encode()),
                (b"access-control-max-age", b"600"),
            ]
            await _respond(send, 204, b"", cors + extra)
            return

        async def with_cors(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *cors]
            await send(message)

        await self.app(scope, receive, with_cors)


def _allow_headers(headers: dict[str, str]) -> str:
    """ALLOW_HEADERS plus the header names the preflight asks for (well-formed ones only)."""
    asked = headers.get("access-control-request-headers", "").split(",")
    names = [h.strip() for h in asked if _HEADER_NAME.fullmatch(h.strip())]
    known = {h.lower() for h in ALLOW_HEADERS.split(", ")}
    return ", ".join([ALLOW_HEADERS, *(n for n in names if n.lower() not in known)])


async def _respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    head = [(b"content-length", str(len(body)).encode()), *headers]
    if body:
        head.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})
