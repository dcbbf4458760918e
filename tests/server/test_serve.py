"""A real `cascade serve` answering the openai SDK and raw HTTP: whole and streamed replies,
usage and timings, stop strings, a client leaving mid-stream, clients at once, stats."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cli.ingest_helpers import cli
from tests.server.helpers import KEY, MODEL, Server, events, make_home

pytestmark = pytest.mark.subprocess

TIMING_KEYS = {"cache_n", "prompt_n", "prompt_ms", "predicted_n", "predicted_ms"}
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, model_path: Path, embed_model_path: Path
) -> Iterator[Server]:
    home = make_home(tmp_path_factory.mktemp("serve"), model_path, embed_model_path)
    srv = Server(home, "--api-key", KEY, debug=True)
    try:
        yield srv
    finally:
        assert srv.stop() == 0, srv.stderr()
        assert "Traceback" not in srv.stderr(), srv.stderr()


def check_usage(usage: dict[str, Any], timings: dict[str, Any]) -> None:
    """Usage and timings agree and are possible: the cached tokens are the prompt's tokens
    that were not decoded, never negative, never more than the prompt."""
    assert set(timings) >= TIMING_KEYS, timings
    prompt, cached = usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]
    assert prompt > 0 and 0 <= cached <= prompt, usage
    assert timings["cache_n"] == cached == max(0, prompt - timings["prompt_n"]), (usage, timings)
    assert timings["prompt_n"] >= 1  # the open end is decoded on every request
    assert usage["completion_tokens"] == timings["predicted_n"]
    assert usage["total_tokens"] == prompt + usage["completion_tokens"]


def test_chat_through_the_sdk(server: Server) -> None:
    reply = server.client().chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the capital of France?"},
        ],
        max_tokens=8,
        temperature=0,
        seed=3,
    )
    assert reply.object == "chat.completion" and reply.id.startswith("chatcmpl-")
    assert reply.model == MODEL
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert reply.usage is not None and 1 <= reply.usage.completion_tokens <= 8
    assert reply.model_extra is not None
    check_usage(reply.usage.model_dump(), reply.model_extra["timings"])


def test_chat_stream_through_the_sdk_with_usage(server: Server) -> None:
    stream = server.client().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Name three colours."}],
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    *content, finish, usage = chunks
    assert finish.choices[0].finish_reason in ("stop", "length")
    assert all(c.choices[0].finish_reason is None for c in content)
    text = "".join(c.choices[0].delta.content or "" for c in content)
    assert text.strip()
    assert usage.choices == [] and usage.usage is not None
    assert 1 <= usage.usage.completion_tokens <= 8
    assert finish.model_extra is not None and usage.model_extra is not None
    check_usage(usage.usage.model_dump(), usage.model_extra["timings"])
    assert finish.model_extra["timings"] == usage.model_extra["timings"]


def test_raw_stream_without_usage_ends_with_done(server: Server) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 4,
        "temperature": 0,
        "stream": True,
    }
    response = server.post("/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    got = events(response)
    assert got[-1] == "[DONE]"
    chunks = got[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(len(c["choices"]) == 1 and "usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"  # 4 tokens never finish it
    assert set(chunks[-1]["timings"]) >= TIMING_KEYS
    assert chunks[-1]["timings"]["predicted_n"] == 4


def test_completions_with_stop_strings(server: Server) -> None:
    client = server.client()
    whole = client.completions.create(model=MODEL, prompt=COUNTING, max_tokens=6, temperature=0)
    assert whole.object == "text_completion" and whole.id.startswith("cmpl-")
    assert whole.choices[0].finish_reason == "length"
    assert "11" in whole.choices[0].text  # the model goes on counting
    cut = client.completions.create(
        model=MODEL, prompt=[COUNTING], max_tokens=12, temperature=0, stop=["13", "99"]
    )
    assert cut.choices[0].finish_reason == "stop"
    assert "12" in cut.choices[0].text and "13" not in cut.choices[0].text
    streamed = client.completions.create(
        model=MODEL, prompt=COUNTING, max_tokens=12, temperature=0, stop="13", stream=True
    )
    parts = list(streamed)
    assert all(p.object == "text_completion" for p in parts)
    assert parts[-1].choices[0].finish_reason == "stop"
    assert "".join(p.choices[0].text for p in parts) == cut.choices[0].text


def _leave_mid_reply(server: Server, stream: bool) -> None:
    """Ask for a long completion, wait until it is being generated, then drop the connection."""
    body = json.dumps(
        {"model": MODEL, "prompt": COUNTING, "max_tokens": 900, "temperature": 0, "stream": stream}
    ).encode()
    host, port = server.base.removeprefix("http://").rsplit(":", 1)
    replying = server.logged("request replying")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        head = (
            f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body)
        if stream:
            seen = b""
            while seen.count(b"data: ") < 4:
                data = sock.recv(4096)
                assert data, seen
                seen += data
            assert b" 200 " in seen.split(b"\r\n", 1)[0]
        else:  # the reply is being generated: leave before it is sent
            server.wait_log("request replying", replying + 1)


def _generated(server: Server) -> int:
    """The server's count of generated tokens, as `cascade stats` shows it."""
    proc = cli(["stats", "--json"], server.home)
    assert proc.returncode == 0, proc.stderr
    count: int = json.loads(proc.stdout)["server"]["generated_tokens"]
    return count


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_leaving_mid_reply_stops_the_generation(server: Server, stream: bool) -> None:
    # every request before this one has ended (and counted its tokens)
    server.wait_log("request ended", server.logged("request queued"))
    ended, before = server.logged("request ended"), _generated(server)
    _leave_mid_reply(server, stream)
    server.wait_log("request ended", ended + 1)
    # counting goes on to all 900 tokens when nobody stops it: fewer means it was stopped
    assert _generated(server) - before < 900
    # and the worker is free: the next request is answered
    reply = server.client().completions.create(
        model=MODEL, prompt="Hello", max_tokens=2, temperature=0
    )
    assert reply.choices[0].text is not None
    assert "Traceback" not in server.stderr()


def test_clients_at_once_all_get_the_one_at_a_time_answers(server: Server) -> None:
    prompts = ["What is 2+2?", "Name a fruit.", "Say goodbye."]

    def ask(prompt: str) -> str:
        reply = server.client().chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=6,
            temperature=0,
        )
        return reply.choices[0].message.content or ""

    alone = [ask(p) for p in prompts]
    together: dict[int, str] = {}
    failures: list[BaseException] = []

    def run(i: int) -> None:
        try:
            together[i] = ask(prompts[i])
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, failures
    assert [together[i] for i in range(len(prompts))] == alone


def test_server_counters_reach_cascade_stats_while_it_runs(server: Server) -> None:
    response = server.post(
        "/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3},
    )
    assert response.status_code == 200, response.text
    proc = cli(["stats", "--json"], server.home)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    counters = data["server"]
    assert counters["requests"] >= 1 and counters["generated_tokens"] >= 1
    assert counters["prompt_tokens"] + counters["cached_tokens"] > 0
    assert "server" not in data["tiers"]
    auth = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client() as client:  # the store stays readable by other processes meanwhile
        assert client.get(f"{server.base}/health", headers=auth).json()["status"] == "ok"
