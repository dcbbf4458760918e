"""The remote tier against a real redis-server: values, verification, faults, redaction."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
import pytest

from cascade_cli.errors import ConfigError
from cascade_cli.store import Stats
from cascade_cli.store.remote import Record, RemoteTier, check_url, redact
from tests.remote.conftest import Clock
from tests.remote.redis_proc import REDIS, SKIP_REASON, RedisProc

pytestmark = [pytest.mark.redis, pytest.mark.skipif(REDIS is None, reason=SKIP_REASON)]

REC = Record(start=128, end=132, pos=40, scheme="q4", tokens=np.array([5, 6, 7, 8], "<i4"))


def tier(url: str, **kw: object) -> tuple[RemoteTier, Stats]:
    stats = Stats()
    return RemoteTier(url, "testns", stats, **kw), stats  # type: ignore[arg-type]


def counters(stats: Stats) -> dict[str, int]:
    return {name: v for (t, name), v in stats.pending()[0].items() if t == "remote"}


def test_a_chunk_round_trips_and_is_checked(redis_server: RedisProc) -> None:
    t, stats = tier(redis_server.url)
    payload = bytes(range(256)) * 40
    assert t.put("a1", payload, REC)
    got = t.get("a1")
    assert got is not None
    data, rec = got
    assert data == payload
    assert (rec.start, rec.end, rec.pos, rec.scheme) == (128, 132, 40, "q4")
    assert rec.tokens.tolist() == [5, 6, 7, 8]
    assert t.get("absent") is None
    assert t.exists(["a1", "absent"]) == [True, False]
    c = counters(stats)
    assert c["hits"] == 1 and c["misses"] == 1 and c["published"] == 1
    assert c["bytes_read"] == c["bytes_written"] == len(payload)
    keys = sorted(k.decode() for k in redis_server.client().keys("*"))
    assert keys == ["cascade:v1:testns:a1:kv", "cascade:v1:testns:a1:meta"]  # bytes, then meta
    latency = stats.pending()[1]
    assert sum(latency["remote_read"]) >= 2 and sum(latency["remote_write"]) == 1


@pytest.mark.parametrize("damage", ["flip", "truncate", "address", "meta"])
def test_a_damaged_value_is_a_miss_never_served(redis_server: RedisProc, damage: str) -> None:
    t, stats = tier(redis_server.url)
    payload = b"\x01" * 5000
    assert t.put("a1", payload, REC)
    raw = redis_server.client()
    kv, meta = "cascade:v1:testns:a1:kv", "cascade:v1:testns:a1:meta"
    if damage == "flip":
        raw.setrange(kv, 100, b"\x02")
    elif damage == "truncate":
        raw.set(kv, payload[:-1])
    elif damage == "address":  # a valid value copied under another chunk's key
        assert t.put("a2", payload, REC)
        raw.set(kv, raw.get("cascade:v1:testns:a2:kv"))
        raw.set(meta, raw.get("cascade:v1:testns:a2:meta"))
    else:
        raw.set(meta, b"{not json")
    assert t.get("a1") is None
    c = counters(stats)
    assert c["corrupt"] == 1 and c["misses"] == 1 and "hits" not in c
    assert not raw.exists(kv) and not raw.exists(meta)  # dropped: the next publish replaces it


def test_ttl_is_set_when_asked(redis_server: RedisProc) -> None:
    t, _ = tier(redis_server.url, ttl=600)
    assert t.put("a1", b"x" * 10, REC)
    ttl = redis_server.client().ttl("cascade:v1:testns:a1:kv")
    assert 0 < ttl <= 600


def test_absent_redis_warns_once_and_misses(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.remote.redis_proc import free_port

    t, stats = tier(f"redis://default:s3cret@127.0.0.1:{free_port()}/0")
    with caplog.at_level(logging.WARNING, logger="cascade.remote"):
        assert not t.ping()
        assert t.get("a1") is None
        assert not t.put("a1", b"x", REC)
        assert t.exists(["a1"]) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "unavailable" in warnings[0] and "***" in warnings[0]
    assert "s3cret" not in caplog.text
    c = counters(stats)
    assert c["errors"] >= 4 and c["misses"] == 1


def test_killed_redis_is_survived_and_reconnected(
    redis_server: RedisProc, tier_clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    t, stats = tier(redis_server.url)
    assert t.put("a1", b"x" * 100, REC)
    redis_server.kill()
    with caplog.at_level(logging.WARNING, logger="cascade.remote"):
        assert t.get("a1") is None  # the pooled connection is dead: an error, a miss
        assert t.get("a1") is None  # down: not even tried
    assert not t.up
    redis_server.start()  # same port, empty (no persistence)
    assert t.get("a1") is None and not t.up  # still down: not tried before RETRY s
    tier_clock.retry_passes()
    assert t.get("a1") is None  # answered: a plain miss now
    assert t.put("a1", b"y" * 100, REC)
    got = t.get("a1")
    assert got is not None and got[0] == b"y" * 100
    assert counters(stats)["errors"] >= 2
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1


def test_a_hung_redis_is_bounded_by_the_timeout(
    redis_server: RedisProc, caplog: pytest.LogCaptureFixture
) -> None:
    t, stats = tier(redis_server.url, timeout=0.3)
    assert t.put("a1", b"x" * 100, REC)
    redis_server.pause()
    got: list[object] = []
    try:
        with caplog.at_level(logging.WARNING, logger="cascade.remote"):
            # in a thread: a call that waited for the hung Redis would hang the test
            reader = threading.Thread(target=lambda: got.extend([t.get("a1"), t.get("a1")]))
            reader.start()
            reader.join(60)
            assert got == [None, None], "a read waited on while Redis hung"  # its timeout ended it
    finally:
        redis_server.resume()
        reader.join(60)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "unavailable" in warning and "timeout" in warning.lower(), warning
    assert counters(stats)["errors"] == 2
    # down now: the second read never went to Redis (one timed read; the put's write)
    latency = stats.pending()[1]
    assert sum(latency["remote_read"]) == 1 and sum(latency["remote_write"]) == 1


def test_wrong_password_warns_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = RedisProc(tmp_path / "redis", password="right-pass")
    try:
        url = f"redis://default:wrong-pass@127.0.0.1:{server.port}/0"
        t, _ = tier(url)
        with caplog.at_level(logging.WARNING, logger="cascade.remote"):
            assert not t.ping()
            assert t.get("a1") is None
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1
        assert "wrong-pass" not in caplog.text and "right-pass" not in caplog.text
        good, _ = tier(server.url)
        assert good.ping()
    finally:
        server.stop()


def test_maxmemory_eviction_gives_misses(tmp_path: Path) -> None:
    server = RedisProc(tmp_path / "redis", maxmemory="4mb")
    try:
        t, stats = tier(server.url)
        payload = b"\x07" * 400_000
        for i in range(30):  # 12 MB into 4 MB: the least recently used are evicted
            t.put(f"c{i}", payload, REC)
        held = [t.get(f"c{i}") is not None for i in range(30)]
        assert not all(held) and any(held)
        assert held[-1]  # the newest survive
        c = counters(stats)
        assert c["misses"] == held.count(False) and "corrupt" not in c
    finally:
        server.stop()


def test_manifest_round_trip_and_damage(redis_server: RedisProc) -> None:
    t, stats = tier(redis_server.url)
    body = {"name": "book", "chunks": [[0, 4, 40, "a1"]]}
    assert t.put_manifest("book", body)
    assert t.get_manifest("book") == body
    assert t.get_manifest("other") is None
    redis_server.client().setrange("cascade:v1:testns:doc:book", 12, b"\xff")
    assert t.get_manifest("book") is None
    assert counters(stats)["corrupt"] == 1


def test_urls_are_checked_and_redacted() -> None:
    assert redact("redis://u:p4ss@h:1/0") == "redis://u:***@h:1/0"
    assert redact("rediss://:p4ss@h/2") == "rediss://:***@h/2"
    assert redact("redis://h:1/0") == "redis://h:1/0"
    assert redact("redis://p4ss@h:1/0") == "redis://:***@h:1/0"  # a password alone
    assert "p4ss" not in redact("redis://u:p4ss@h:x/0")  # even in a URL with a bad port
    # redis-py reads connection settings, a password among them, from the query
    assert redact("redis://h:1/0?password=p4ss") == "redis://h:1/0?***"
    assert check_url("rediss://h:6380/1") == "rediss://h:6380/1"
    for bad in ("http://h:1/0", "redis://", "redis://h:1/x", "h:6379", "redis://u:p4ss@h:x/0"):
        with pytest.raises(ConfigError) as exc:
            check_url(bad)
        assert "p4ss" not in exc.value.one_line()
    with pytest.raises(ConfigError) as exc:
        check_url("http://u:p4ss@h:1/0")
    assert "p4ss" not in exc.value.one_line()
