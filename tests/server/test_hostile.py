"""A real `cascade serve` under hostile use: web pages and rebound host names, oversized and
endless requests, a full queue, cache salts, and a `cascade chat` writing the same store."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.documents.helpers import env_for, query
from tests.server.helpers import KEY, MODEL, Server, assert_error, make_home
from tests.server.test_lifecycle import HISTORY

pytestmark = pytest.mark.subprocess

CHAT = "/v1/chat/completions"
GOOD = "http://good.example:8000"
HELLO = {"model": MODEL, "messages": [{"role": "user", "content": "Say yes."}], "max_tokens": 2}


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, model_path: Path, embed_model_path: Path
) -> Iterator[Server]:
    home = make_home(tmp_path_factory.mktemp("serve-hostile"), model_path, embed_model_path)
    bounds = ["--max-body-size", "64KiB", "--max-messages", "128", "--max-queue", "1"]
    srv = Server(home, "--api-key", KEY, "--allow-origin", GOOD, *bounds, debug=True)
    try:
        yield srv
    finally:
        assert srv.stop() == 0, srv.stderr()
        assert "Traceback" not in srv.stderr(), srv.stderr()


def _chat_usage(server: Server, body: dict[str, Any]) -> dict[str, Any]:
    response = server.post(CHAT, body)
    assert response.status_code == 200, response.text
    data = response.json()
    usage: dict[str, Any] = data["usage"]
    usage["prompt_n"] = data["timings"]["prompt_n"]
    return usage


def test_a_web_page_on_another_origin_is_refused(server: Server) -> None:
    evil = {"Origin": "http://evil.example", "Content-Type": "text/plain"}
    refused = server.post(CHAT, HELLO, headers=evil)
    assert_error(refused, 403, code="origin_not_allowed")
    assert "access-control-allow-origin" not in refused.headers
    # a preflight from it gets no CORS grant either
    preflight = httpx.options(
        f"{server.base}{CHAT}",
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
        timeout=10,
    )
    assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers


def test_a_rebound_host_name_is_refused(server: Server) -> None:
    response = server.post(CHAT, HELLO, headers={"Host": "rebind.example"})
    assert_error(response, 403, code="host_not_allowed")
    for host in ("localhost", server.base.removeprefix("http://")):
        assert server.post(CHAT, HELLO, headers={"Host": host}).status_code == 200


def test_a_body_not_declared_json_is_refused(server: Server) -> None:
    for kind in ("text/plain", "application/x-www-form-urlencoded"):
        response = server.post(CHAT, HELLO, headers={"Content-Type": kind})
        assert_error(response, 415, code="unsupported_media_type")
    ok = server.post(CHAT, HELLO, headers={"Content-Type": "application/json; charset=utf-8"})
    assert ok.status_code == 200, ok.text


def test_allowed_and_loopback_origins_get_cors(server: Server) -> None:
    for origin in (GOOD, "http://localhost:5173", "http://127.0.0.1:3000"):
        response = server.post(CHAT, HELLO, headers={"Origin": origin})
        assert response.status_code == 200, response.text
        assert response.headers["access-control-allow-origin"] == origin
    preflight = httpx.options(
        f"{server.base}{CHAT}",
        headers={
            "Origin": GOOD,
            "Access-Control-Request-Method": "POST",
            # what the OpenAI JS SDK sends from a page; browsers match exact names only
            "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os, "
            "x-stainless-retry-count",
        },
        timeout=10,
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == GOOD
    granted = [
        h.strip().lower() for h in preflight.headers["access-control-allow-headers"].split(",")
    ]
    assert {"authorization", "content-type", "x-stainless-os", "x-stainless-retry-count"} <= set(
        granted
    )
    assert not any("*" in h for h in granted)


def _answer_before_the_body_ends(server: Server, headers: str, sent: bytes) -> dict[str, Any]:
    """POST `headers`, then `sent` (part of a body that never ends), and read the answer the
    server gives meanwhile: status and JSON body."""
    host, port = server.base.removeprefix("http://").rsplit(":", 1)
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\n{headers}\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head.encode() + sent)
        data = b""
        while b"\r\n\r\n" not in data:
            more = sock.recv(65536)
            assert more, f"the server closed without an answer: {data!r}"
            data += more
        top, body = data.split(b"\r\n\r\n", 1)
        length = re.search(rb"(?i)content-length: *(\d+)", top)
        assert length, top
        while len(body) < int(length.group(1)):
            more = sock.recv(65536)
            assert more, f"the answer was cut short: {data!r}"
            body += more
    return {"status": int(top.split(b" ", 2)[1]), "body": json.loads(body)}


def test_oversized_bodies_are_413_without_being_read(server: Server) -> None:
    big = {**HELLO, "messages": [{"role": "user", "content": "x" * (1 << 20)}]}
    assert_error(server.post(CHAT, big), 413, code="request_too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while reading
        data = json.dumps(big).encode()
        for o in range(0, len(data), 8192):
            yield data[o : o + 8192]

    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    chunked = httpx.post(f"{server.base}{CHAT}", content=chunks(), headers=headers, timeout=60)
    assert_error(chunked, 413, code="request_too_large")
    # not read: a declared length over the limit is refused before any of the body is sent,
    declared = _answer_before_the_body_ends(server, f"Content-Length: {1 << 20}\r\n", b"")
    # and a chunked body as soon as it passes the limit (64 KiB), its end never sent
    piece = b"2000\r\n" + b"x" * 0x2000 + b"\r\n"
    endless = _answer_before_the_body_ends(server, "Transfer-Encoding: chunked\r\n", piece * 9)
    for answer in (declared, endless):
        assert answer["status"] == 413, answer
        assert answer["body"]["error"]["code"] == "request_too_large", answer
    assert server.post(CHAT, HELLO).status_code == 200  # and the server answers on


def test_too_many_messages_and_too_many_tokens_are_400(server: Server) -> None:
    many = [{"role": "system", "content": "Be brief."}] * 128 + [{"role": "user", "content": "Hi"}]
    error = assert_error(server.post(CHAT, {**HELLO, "messages": many}), 400, param="messages")
    assert "limit of 128" in error["message"]
    response = server.post(CHAT, {**HELLO, "max_tokens": 4097})
    assert_error(response, 400, param="max_tokens")


def test_a_full_queue_is_429_with_retry_after(server: Server) -> None:
    body = json.dumps(
        {"model": MODEL, "prompt": "1, 2, 3,", "max_tokens": 900, "stream": True}
    ).encode()
    host, port = server.base.removeprefix("http://").rsplit(":", 1)
    replying, queued = server.logged("request replying"), server.logged("request queued")
    got: dict[str, httpx.Response] = {}
    waiter = threading.Thread(target=lambda: got.setdefault("b", server.post(CHAT, HELLO)))
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        head = (
            f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body)
        server.wait_log("request replying", replying + 1)  # the stream holds the worker
        waiter.start()
        server.wait_log("request queued", queued + 2)  # and one request waits: the limit
        full = server.post(CHAT, HELLO)
        error = assert_error(full, 429, code="queue_full")
        assert int(full.headers["retry-after"]) >= 1, full.headers
        assert "max_queue" in error["message"]
    waiter.join(120)  # the stream's client left: the waiting request is answered
    assert got["b"].status_code == 200, got["b"].text


def test_cache_salt_keeps_clients_apart(server: Server) -> None:
    body = {"model": MODEL, "messages": HISTORY, "max_tokens": 2, "temperature": 0}
    first = _chat_usage(server, {**body, "cache_salt": "client-a"})
    again = _chat_usage(server, {**body, "cache_salt": "client-a"})
    assert again["prompt_tokens_details"]["cached_tokens"] > 0  # the same salt shares
    other = _chat_usage(server, {**body, "cache_salt": "client-b"})
    assert other["prompt_tokens"] == first["prompt_tokens"]
    # another salt shares nothing, not even the system prompt: nothing to learn from timing
    assert other["prompt_tokens_details"]["cached_tokens"] == 0, other
    assert other["prompt_n"] == other["prompt_tokens"]


def _api_chunks(home: Path) -> int:
    """The server's stored blocks (chunk rows of api: owners), read beside the writers."""
    rows = query(home, "SELECT COUNT(*) FROM chunks WHERE owner LIKE 'api:%'")
    return int(rows[0][0])


def _long_history(turns: int = 36) -> list[dict[str, str]]:
    """A conversation longer than the server's 1024-token window (2 * turns + 2 messages)."""
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(turns):
        note = f"Note {i}: the parcel for house {i} goes to the {i % 7}th floor, blue door. " * 4
        messages += [{"role": "user", "content": note}, {"role": "assistant", "content": "Noted."}]
    question = "Which floor? Note 0: the parcel for house 0 goes to the 0th floor, blue door."
    messages.append({"role": "user", "content": question})
    return messages


@pytest.mark.slow
def test_beside_a_chat_writer_usage_stays_honest_and_a_session_opens_once(
    server: Server,
) -> None:
    args = [sys.executable, "-m", "cascade_cli", "chat", "-s", "desk", "--max-tokens", "4"]
    _chat_usage(server, HELLO)  # the server is idle after a request: it lets the store go
    chat = subprocess.Popen(
        [*args, "--gpu-cache-size", "1024"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_for(server.home),
    )
    assert chat.stdin is not None and chat.stdout is not None
    try:
        chat.stdin.write("Hello\n")
        chat.stdin.flush()
        assert chat.stdout.readline(), "the chat did not answer"  # it holds the writer lock
        # the same session in a second terminal: one line, before the model loads
        second = subprocess.run(
            args, input="Hi\n", capture_output=True, text=True, timeout=120,
            env=env_for(server.home), check=False,
        )  # fmt: skip
        assert second.returncode != 0 and "Traceback" not in second.stderr, second.stderr
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "session 'desk'" in lines[0], second.stderr
        body = {"model": MODEL, "messages": _long_history(), "max_tokens": 2}
        # a conversation longer than the window, paged through: with nothing saved beside the
        # writer the old count went negative (-187 of 3816 prompt tokens). The chat lets the
        # store go while its user types, so the server saves its blocks beside it.
        before = _api_chunks(server.home)
        for _ in range(2):
            usage = _chat_usage(server, body)
            cached = usage["prompt_tokens_details"]["cached_tokens"]
            # what the model saw: the 1024-token window's share, not the 3,800-token transcript
            assert 256 < usage["prompt_tokens"] <= 1024 and 0 <= cached <= usage["prompt_tokens"]
            assert cached == max(0, usage["prompt_tokens"] - usage["prompt_n"]), usage
        assert _api_chunks(server.home) > before  # saved beside the open chat
        chat.stdin.write("And again\n")  # the chat takes the store back for its turn
        chat.stdin.flush()
        assert chat.stdout.readline(), "the chat did not answer its second message"
    finally:
        chat.stdin.close()
        assert chat.wait(120) == 0, chat.stderr.read() if chat.stderr else ""
    assert chat.stderr is not None
    assert "being written by another process" not in chat.stderr.read()  # the chat wrote
    # the chat is over: its session opens again
    again = subprocess.run(
        args, input="Bye\n", capture_output=True, text=True, timeout=300,
        env=env_for(server.home), check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
