"""A real `cascade serve` process on a free loopback port, and clients for it."""

from __future__ import annotations

import json
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.documents.helpers import env_for
from tests.suite_model import TEST_MODEL
from tests.wait import until

MODEL = TEST_MODEL
KEY = "test-key-7f3a"
#: A small window keeps prompt decodes and the store small on 2 cores.
SMALL = ["--gpu-cache-size", "1024", "--block-size", "128"]


def make_home(root: Path, model_path: Path, embed_model_path: Path) -> Path:
    """A CASCADE_HOME under root whose models/ links the test models (as tests/conftest.home)."""
    (root / "models").mkdir(parents=True, exist_ok=True)
    for path in (model_path, embed_model_path):
        link = root / "models" / path.name
        if not link.exists():
            link.symlink_to(path)
    return root


class Server:
    """`python -m cascade_cli serve --port 0 ARGS` in CASCADE_HOME=home, started and ready.
    `debug`: run with --debug, whose log lines (``request queued``, ``request replying``) let
    a test wait for the worker's state (the server shows none of it to clients)."""

    def __init__(self, home: Path, *args: str, timeout: float = 180, debug: bool = False) -> None:
        self.home = home
        self.err_path = home / f"serve-{time.monotonic_ns()}.err"
        self._err = self.err_path.open("w")
        flag = ["--debug"] if debug else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cascade_cli", *flag, "serve", "--port", "0", *SMALL, *args],
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            env=env_for(home),
        )
        self.ready_line = self._ready(timeout)
        found = re.search(r"(http://\S+)/v1", self.ready_line)
        assert found, self.ready_line
        self.base = found.group(1)
        self.v1 = f"{self.base}/v1"

    def _ready(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                line = self.proc.stdout.readline()
                if line.startswith("cascade serve: http"):
                    return line
                if line == "":
                    break
            elif self.proc.poll() is not None:
                break
        self.proc.kill()
        self.proc.wait(30)
        raise AssertionError(f"the server did not start: {self.stderr()}")

    def stderr(self) -> str:
        if not self._err.closed:
            self._err.flush()
        return self.err_path.read_text()

    def client(self, key: str | None = KEY) -> Any:
        """An openai SDK client for this server (no retries: every failure shows)."""
        from openai import OpenAI

        return OpenAI(base_url=self.v1, api_key=key or "none", max_retries=0, timeout=120)

    def post(
        self,
        path: str,
        body: Any,
        key: str | None = KEY,
        headers: dict[str, str] | None = None,
        **kw: Any,
    ) -> httpx.Response:
        """A raw POST: `body` is sent as JSON unless it is bytes; `headers` add to (or
        replace) Authorization and Content-Type: application/json."""
        sent = {"Authorization": f"Bearer {key}"} if key else {}
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        return httpx.post(f"{self.base}{path}", content=content, headers=sent, timeout=120, **kw)

    def health(self, key: str | None = KEY) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        response = httpx.get(f"{self.base}/health", headers=headers, timeout=10)
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()
        return data

    def logged(self, fragment: str) -> int:
        """How many times the server's stderr holds `fragment`."""
        return self.stderr().count(fragment)

    def wait_log(self, fragment: str, count: int, timeout: float = 60) -> None:
        """Wait until `fragment` is in the server's stderr `count` times (a --debug server)."""

        def logged() -> bool:
            assert self.proc.poll() is None, self.stderr()[-2000:]
            return self.logged(fragment) >= count

        until(logged, timeout, lambda: f"{fragment!r} x{count} in {self.stderr()[-2000:]!r}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Signal the server and wait for it; its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(30)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._err.close()
        return rc


def assert_error(
    response: httpx.Response, status: int, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """OpenAI's error shape with this status (and param/code when given); the error object."""
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"], error
    assert "Traceback" not in error["message"]
    if param is not None:
        assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error
    return error


def events(response: httpx.Response) -> list[Any]:
    """The `data:` payloads of an SSE body ("[DONE]" kept as a string)."""
    out: list[Any] = []
    for block in response.text.split("\n\n"):
        if block.startswith("data: "):
            data = block[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out
