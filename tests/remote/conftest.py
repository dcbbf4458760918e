"""Fixtures of the remote tier's tests: a real redis-server per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paging.conftest import ctx  # noqa: F401  (the in-process tests' small context)
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
