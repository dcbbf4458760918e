"""Redis killed mid-ask and mid-ingest, in process (the kill lands at a known point): the
request still answers from the local tiers, and the tier reconnects when Redis returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cascade_cli.config import Settings
from cascade_cli.documents import manifests
from cascade_cli.documents.ingest import ingest
from cascade_cli.documents.library import Library
from cascade_cli.documents.remote_source import record_of
from cascade_cli.engine import Context
from cascade_cli.errors import StoreError
from cascade_cli.store import snapshot
from cascade_cli.window.ask import AskResult, ask
from tests.documents.helpers import BLOCK, NEEDLE, WINDOW, write_text
from tests.remote.conftest import Clock
from tests.remote.redis_proc import REDIS, SKIP_REASON, RedisProc

pytestmark = [pytest.mark.redis, pytest.mark.skipif(REDIS is None, reason=SKIP_REASON)]


def settings(store: Path, url: str) -> Settings:
    return Settings(
        gpu_cache_size=WINDOW, block_size=BLOCK, disk_cache_path=store, threads=1,
        recall="bm25", remote_cache_url=url,
    )  # fmt: skip


def kill_after_first(tier: Any, name: str, server: RedisProc) -> None:
    """Make the tier's `name` call SIGKILL Redis right after its first success."""
    real = getattr(tier, name)

    def call(*args: Any, **kw: Any) -> Any:
        got = real(*args, **kw)
        if got:
            server.kill()
        return got

    setattr(tier, name, call)


def test_redis_killed_mid_ingest_then_mid_ask(
    tmp_path: Path, ctx: Context, redis_server: RedisProc, tier_clock: Clock
) -> None:
    url = redis_server.url
    book = write_text(tmp_path / "book.txt", 2400, NEEDLE)
    with Library(settings(tmp_path / "a", url), ctx) as lib:
        assert lib.remote is not None
        kill_after_first(lib.remote.tier, "put", redis_server)
        doc = ingest(ctx, lib, book, "book", "utf-8", lambda s: None)
        assert doc.status == "ready" and doc.chunks >= 4  # the local ingest is whole
        lib.pager.flush()
        with pytest.raises(StoreError, match="unavailable"):
            manifests.publish(lib, doc)
        del lib.remote.tier.put  # (no more kills)
        redis_server.start()  # back, empty: the tier reconnects by itself
        tier_clock.retry_passes()
        done = manifests.publish(lib, doc)
        assert done.uploaded == doc.chunks and not done.missing
        assert snapshot(lib.disk)["tiers"]["remote"]["errors"] >= 1

    with Library(settings(tmp_path / "b", url), ctx) as lib:
        assert lib.remote is not None
        pulled = manifests.pull(lib, "book")
        assert pulled.chunks == doc.chunks and not lib.disk.chunks(pulled.owner)
        kill_after_first(lib.remote.tier, "get", redis_server)
        result = AskResult(doc="book")
        answer = "".join(
            ask(ctx, lib, pulled, "What is the pass key?", result, window=WINDOW,
                mode="bm25", max_tokens=12)
        )  # fmt: skip
        assert answer.strip()
        tiers = [c["tier"] for c in result.chunks]
        assert "recomputed" in tiers and set(tiers) <= {"remote", "recomputed"}
        counters = snapshot(lib.disk)["tiers"]["remote"]
        assert counters["errors"] >= 1
        assert counters["hits"] >= 1  # the one fetched before the kill


def test_a_value_that_does_not_decode_is_recomputed(
    tmp_path: Path, ctx: Context, redis_server: RedisProc
) -> None:
    """Bytes that pass the size and checksum but are no KV state (a writer's bug) never reach
    the window: counted as corrupt, dropped, the chunk recomputed and published again."""
    url = redis_server.url
    with Library(settings(tmp_path / "a", url), ctx) as lib:
        doc = ingest(ctx, lib, write_text(tmp_path / "t.txt", 1200), "t", "utf-8", lambda s: None)
        lib.pager.flush()
        manifests.publish(lib, doc)
    with Library(settings(tmp_path / "b", url), ctx) as lib:
        assert lib.remote is not None
        pulled = manifests.pull(lib, "t")
        addresses = [lib.remote.chain(pulled, i) for i in range(pulled.chunks)]
        for i, address in enumerate(addresses):
            assert address is not None
            meta = lib.chunk_meta(pulled, i)
            assert lib.remote.tier.put(address, b"not a KV state" * 50, record_of(meta))
        result = AskResult(doc="t")
        answer = "".join(ask(ctx, lib, pulled, "Who is Sir Walter?", result, window=WINDOW,
                             mode="bm25", max_tokens=8))  # fmt: skip
        assert answer.strip()
        assert {c["tier"] for c in result.chunks} == {"recomputed"}
        assert snapshot(lib.disk)["tiers"]["remote"]["corrupt"] >= len(result.chunks)
        lib.pager.flush()  # the recomputed chunks were published again, as real states
        for c in result.chunks:
            got = lib.remote.tier.get(addresses[c["index"]])
            assert got is not None and got[0] != b"not a KV state" * 50
