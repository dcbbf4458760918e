"""A `cascade serve` process on a free loopback port, and a streaming chat client for it (the
server benchmarks: serve.py, soak.py, remote.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.chat_common import env  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(where: Path) -> dict[str, str]:
    return env(where, int(os.environ.get("CASCADE_THREADS", "2")))


class Server:
    """A `cascade serve` process on a free loopback port."""

    def __init__(self, where: Path, *flags: str) -> None:
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(where / "serve.log", "a")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cascade_cli", "serve", "--port", str(self.port), *flags],
            env=_env(where), cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}; see {where}/serve.log")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server did not start")

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        self.log.close()


@contextmanager
def serving(where: Path, *flags: str) -> Iterator[Server]:
    server = Server(where, *flags)
    try:
        yield server
    finally:
        server.stop()


def stream(url: str, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
    """One streamed chat completion: text, time to the first content token, usage, timings."""
    body = {
        "model": model_name(url), "messages": messages, "stream": True, "temperature": 0,
        "max_tokens": max_tokens, "stream_options": {"include_usage": True},
    }  # fmt: skip
    t0 = time.perf_counter()
    ttft = 0.0
    text: list[str] = []
    out: dict[str, Any] = {}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.read().decode()}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            for choice in event.get("choices", []):
                piece = choice.get("delta", {}).get("content") or ""
                if piece and not ttft:
                    ttft = time.perf_counter() - t0
                text.append(piece)
            if event.get("usage"):
                out["usage"] = event["usage"]
            if event.get("timings"):
                out["timings"] = event["timings"]
    out["text"] = "".join(text)
    out["ttft_s"] = ttft or time.perf_counter() - t0
    return out


_MODELS: dict[str, str] = {}


def model_name(url: str) -> str:
    """The id the server lists (asked once per server)."""
    if url not in _MODELS:
        _MODELS[url] = str(httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"])
    return _MODELS[url]
