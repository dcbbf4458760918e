"""RAM tier: exact byte bound, oversize items, counters, threads."""

from __future__ import annotations

import threading

import numpy as np

from cascade_cli.store import RamCache, Stats


def test_byte_bound_is_exact() -> None:
    stats = Stats()
    cache = RamCache(1000, stats)
    for i in range(10):
        assert cache.put(f"k{i}", np.zeros(300, np.uint8))
        assert cache.nbytes <= 1000
    assert cache.nbytes == 900 and cache.keys() == ["k7", "k8", "k9"]
    assert cache.put("k10", b"x" * 100)  # exactly fills the budget
    assert cache.nbytes == 1000 and len(cache) == 4
    assert cache.put("k11", bytearray(1))
    assert cache.nbytes == 701 and "k7" not in cache
    assert cache.evictions == 8
    assert stats.pending()[0][("ram", "evictions")] == 8


def test_oversize_not_cached_and_replace_counts_once() -> None:
    cache = RamCache(100)
    assert not cache.put("big", np.zeros(101, np.uint8))
    assert "big" not in cache and cache.nbytes == 0
    cache.put("a", np.zeros((2, 10), np.float32))  # nbytes, not len
    assert cache.nbytes == 80
    cache.put("a", np.zeros(10, np.uint8))
    assert cache.nbytes == 10 and len(cache) == 1
    assert not cache.put("a", np.zeros(200, np.uint8))  # replaced by nothing
    assert cache.nbytes == 0 and "a" not in cache


def test_hits_misses_lru_order() -> None:
    cache = RamCache(30)
    for k in "abc":
        cache.put(k, b"0123456789")
    assert cache.get("a") is not None  # a is now most recent
    assert cache.get("zz") is None
    cache.put("d", b"0123456789")
    assert cache.keys() == ["c", "a", "d"]
    assert (cache.hits, cache.misses, cache.evictions) == (1, 1, 1)
    assert cache.pop("a") == b"0123456789" and cache.nbytes == 20
    cache.resize(10)
    assert cache.keys() == ["d"] and cache.nbytes == 10
    assert cache.discard_prefix("d") == 1 and cache.nbytes == 0


def test_thread_safety() -> None:
    cache = RamCache(50_000)

    def work(t: int) -> None:
        for i in range(2000):
            cache.put(f"{t}:{i % 50}", np.zeros(100 + (i % 7) * 100, np.uint8))
            cache.get(f"{(t + 1) % 4}:{i % 50}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert cache.nbytes <= 50_000
    assert cache.nbytes == sum(np.asarray(cache.peek(k)).nbytes for k in cache)
