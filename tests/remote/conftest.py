"""Fixtures of the remote tier's tests: a real redis-server per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cascade_cli.store import remote as remote_mod
from tests.documents.conftest import ctx  # noqa: F401  (the in-process tests' small context)
from tests.remote.redis_proc import REDIS, SKIP_REASON, RedisProc


@pytest.fixture()
def redis_server(tmp_path: Path) -> Iterator[RedisProc]:
    """A redis-server of its own on a free loopback port, stopped after the test."""
    if REDIS is None:
        pytest.skip(SKIP_REASON)
    server = RedisProc(tmp_path / "redis")
    try:
        yield server
    finally:
        server.stop()


class Clock:
    """A stand-in for the `time` module of cascade_cli.store.remote, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def retry_passes(self) -> None:
        """Let the tier's RETRY seconds down pass."""
        self.now += remote_mod.RETRY


@pytest.fixture()
def tier_clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The remote tier's clock (it times only the tier's down period): a failure keeps the tier
    down until the test calls retry_passes(), never shorter or longer on a busy machine."""
    clock = Clock()
    monkeypatch.setattr(remote_mod, "time", clock)
    return clock
