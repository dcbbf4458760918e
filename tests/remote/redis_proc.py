"""A real redis-server on a free loopback port, in a temporary directory, for one test."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

from tests.wait import until

#: redis-server, or None when not installed (the tests that need it are skipped, saying so).
REDIS = shutil.which("redis-server")
SKIP_REASON = "redis-server is not installed (apt-get install redis-server; scripts/test.sh does)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisProc:
    """redis-server without persistence: killing it loses everything, as a cache may."""

    def __init__(
        self, root: Path, *, password: str | None = None, maxmemory: str | None = None
    ) -> None:
        self.root = root
        self.port = free_port()
        self.password = password
        self.maxmemory = maxmemory
        self.proc: subprocess.Popen[bytes] | None = None
        root.mkdir(parents=True, exist_ok=True)
        self.start()

    @property
    def url(self) -> str:
        auth = f"default:{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert REDIS is not None
        args = [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.root),
                "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"]  # fmt: skip
        if self.password:
            args += ["--requirepass", self.password]
        if self.maxmemory:
            args += ["--maxmemory", self.maxmemory, "--maxmemory-policy", "allkeys-lru"]
        log = (self.root / "redis.log").open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        proc = self.proc

        def answers() -> bool:
            try:
                return bool(self.client().ping())
            except Exception:
                assert proc.poll() is None, f"redis-server exited: {self.log()}"
                return False

        until(answers, timeout=60, what=lambda: f"redis-server answering ({self.log()})")

    def log(self) -> str:
        return (self.root / "redis.log").read_text()

    def client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, db=0)

    def kill(self) -> None:
        """SIGKILL: gone at once, with everything it held."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP: connections stay open and nothing answers (a hung Redis)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
