"""`cascade serve` starting, refusing to start, stopping on a signal, and keeping its prompt
cache across a restart."""

from __future__ import annotations

import json
import signal
import socket
import threading
from pathlib import Path

import httpx
import pytest

from tests.cli.helpers import assert_one_line_error
from tests.cli.ingest_helpers import cli
from tests.server.helpers import MODEL, SMALL, Server, assert_error, events, make_home

pytestmark = pytest.mark.subprocess

#: A conversation long enough to span several stored blocks of 128 tokens.
HISTORY = [
    {"role": "system", "content": "You are a helpful assistant who answers briefly."},
    {
        "role": "user",
        "content": "Here is a note about my week. On Monday I repaired the garden fence and "
        "planted tomatoes. On Tuesday I visited my sister in the next town and we walked along "
        "the river. On Wednesday I read a long novel about a lighthouse keeper. On Thursday I "
        "baked bread and cleaned the kitchen. On Friday I went to the market for apples, "
        "pears and a sack of flour, and met an old friend from school who now keeps bees. On "
        "Saturday we all went sailing on the lake; the wind was strong and we came back soaked. "
        "On Sunday I rested, wrote letters to my cousins and planned the next week's work in "
        "the garden: new beans, a second row of tomatoes and a bench under the apple tree.",
    },
    {"role": "assistant", "content": "That sounds like a busy and pleasant week."},
    {"role": "user", "content": "What did I do on Wednesday?"},
]


def _stop_while_busy(server: Server) -> tuple[httpx.Response, httpx.Response]:
    """Open a long stream and queue a request behind it, then send SIGINT; both responses."""
    got: dict[str, httpx.Response] = {}
    long = {"model": MODEL, "prompt": "1, 2, 3,", "max_tokens": 900, "stream": True}

    def call(name: str, body: dict[str, object]) -> None:
        got[name] = server.post("/v1/completions", body, key=None)

    queued, replying = server.logged("request queued"), server.logged("request replying")
    threads = [threading.Thread(target=call, args=("streamed", long))]
    threads[0].start()
    server.wait_log("request replying", replying + 1)
    short = {"model": MODEL, "prompt": "Hello", "max_tokens": 2}
    threads.append(threading.Thread(target=call, args=("queued", short)))
    threads[1].start()
    server.wait_log("request queued", queued + 2)  # behind the stream, which still replies
    server.proc.send_signal(signal.SIGINT)
    for t in threads:
        t.join(60)
    assert set(got) == {"streamed", "queued"}, f"not both answered: {got}"
    return got["streamed"], got["queued"]


@pytest.fixture()
def home(tmp_path: Path, model_path: Path, embed_model_path: Path) -> Path:
    return make_home(tmp_path, model_path, embed_model_path)


def test_a_port_in_use_is_one_line_before_the_model_loads(home: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = cli(["serve", "--port", str(port), *SMALL], home)
    assert_one_line_error(proc, f"port {port} on 127.0.0.1 is already in use")
    assert proc.returncode == 2


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--host", "no-such-host.invalid"], "is not an address of this machine"),
        (["--api-key", " "], "--api-key is empty"),
        (["--gpu-cache-size", "lots"], "gpu_cache_size"),
        (["--model", "/nonexistent/model.gguf"], "does not exist"),
    ],
)
def test_bad_flags_are_one_line(home: Path, args: list[str], fragment: str) -> None:
    proc = cli(["serve", "--port", "0", *args], home)
    assert_one_line_error(proc, fragment)


def test_restart_reuses_the_stored_prompt_and_stops_cleanly(home: Path) -> None:
    body = {"model": MODEL, "messages": HISTORY, "max_tokens": 4, "temperature": 0}
    first = Server(home, "--host", "0.0.0.0")
    try:
        assert "without --api-key" in first.stderr()  # every interface, no key: warned
        response = first.post("/v1/chat/completions", body, key=None)
        assert response.status_code == 200, response.text
        cold = response.json()["usage"]
        assert cold["prompt_tokens"] > 128
        stats = json.loads(cli(["stats", "--json"], home).stdout)["server"]
        assert stats["requests"] == 1 and stats["generated_tokens"] == 4
        assert stats["blocks"] >= 2 and stats["bytes"] > 0  # the prompt's blocks, stored
    finally:
        assert first.stop(signal.SIGTERM) == 0, first.stderr()
    assert "server stopped" in first.stderr() and "Traceback" not in first.stderr()

    second = Server(home, debug=True)
    try:
        response = second.post("/v1/chat/completions", body, key=None)
        assert response.status_code == 200, response.text
        warm = response.json()
        assert warm["usage"]["prompt_tokens"] == cold["prompt_tokens"]
        assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, warm
        assert warm["timings"]["prompt_n"] < cold["prompt_tokens"]
        streamed, queued = _stop_while_busy(second)
    finally:
        assert second.stop(signal.SIGINT) == 0, second.stderr()
    # the open stream was ended at its next token and told so (an error event, never a
    # finish_reason: it did not finish); the queued request was told the server is stopping
    assert streamed.status_code == 200
    sent = events(streamed)
    assert sent[-1]["error"]["code"] == "unavailable", sent[-3:]
    assert "[DONE]" not in sent
    assert all(c["choices"][0]["finish_reason"] is None for c in sent[:-1]), sent[-3:]
    assert_error(queued, 503)
    assert "Traceback" not in second.stderr()
    # both were answered by the stop itself, not cut off when uvicorn's 3 s grace ran out
    assert "graceful shutdown exceeded" not in second.stderr()
    stats = json.loads(cli(["stats", "--json"], home).stdout)["server"]
    # the cold and warm requests and the stopped stream; the dropped queued one never ran
    assert stats["requests"] == 3 and stats["cached_tokens"] > 0
    assert "server: 3 requests (0 failed)" in cli(["stats"], home).stdout


def test_ingest_and_ask_run_beside_an_idle_server(home: Path, tmp_path: Path) -> None:
    body = {"model": MODEL, "messages": HISTORY, "max_tokens": 4, "temperature": 0}
    text = tmp_path / "note.txt"
    text.write_text(
        "The lighthouse keeper painted the door blue every spring. " * 40, encoding="utf-8"
    )
    server = Server(home)
    try:
        assert server.post("/v1/chat/completions", body, key=None).status_code == 200
        # between requests the server lets go of the writer lock: a whole ingest runs
        proc = cli(["ingest", str(text), "--name", "note", *SMALL], home)
        assert proc.returncode == 0, proc.stderr
        question = ["ask", "note", "What colour was the door?", "--max-tokens", "4"]
        asked = cli([*question, "--gpu-cache-size", "1024"], home)
        assert asked.returncode == 0, asked.stderr
        # and takes it back for the next request, which still finds its stored prompt
        again = server.post("/v1/chat/completions", body, key=None).json()
        assert again["timings"]["prompt_n"] < again["usage"]["prompt_tokens"] // 4
        docs = json.loads(cli(["docs", "--json"], home).stdout)
        assert [d["name"] for d in docs["documents"]] == ["note"]
    finally:
        assert server.stop() == 0, server.stderr()
