"""Prefetch / write-back pools and cross-process stats."""

from __future__ import annotations

import itertools
import threading
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cascade_cli.errors import CodecError, CorruptChunkError, NotFoundError
from cascade_cli.store import ChunkMeta, DiskStore, Pager, RamCache, snapshot
from cascade_cli.store.stats import BUCKETS, bucket_of
from tests.wait import until


def encode(blob: np.ndarray, scheme: str) -> bytes:
    """A stand-in codec: zlib, and a scheme that fails."""
    if scheme == "bad":
        raise CodecError("cannot encode", None)
    return zlib.compress(blob.tobytes(), 1)


def decode(payload: bytes) -> np.ndarray:
    return np.frombuffer(zlib.decompress(payload), np.uint8)


def blob(i: int, n: int = 50_000) -> np.ndarray:
    return np.random.default_rng(i).integers(0, 8, n, dtype=np.uint8)


def cm(i: int, scheme: str = "z") -> ChunkMeta:
    return ChunkMeta(f"d:{i}", "d", i, i * 8, i * 8 + 8, np.arange(8), scheme=scheme)


def test_write_back_then_prefetch_same_bytes(tmp_path: Path) -> None:
    with DiskStore.open(tmp_path, "fp") as disk:
        ram = RamCache(120_000, disk.stats)
        with Pager(disk, ram, encode, decode, max_pending=3) as pager:
            for i in range(10):
                pager.save(cm(i), blob(i))
            pager.flush()
            assert len(disk.chunks("d")) == 10
            assert pager.prefetch([f"d:{i}" for i in range(6)]) == 6
            for i in range(10):  # 0–5 prefetched (some evicted from RAM), 6–9 loaded on demand
                assert np.array_equal(pager.get(f"d:{i}"), blob(i))
            assert np.array_equal(pager.get("d:9"), blob(9))  # RAM hit
            assert ram.hits >= 1 and ram.nbytes <= 120_000
            pager.save(cm(9), blob(99), cache=True)  # replacing a key drops/refreshes its state
            assert np.array_equal(pager.get("d:9"), blob(99))
            pager.flush()
            ram.clear()
            assert np.array_equal(pager.get("d:9"), blob(99))
            with pytest.raises(NotFoundError):
                pager.get("d:404")


def test_prefetch_surfaces_corruption(tmp_path: Path) -> None:
    with DiskStore.open(tmp_path, "fp") as disk:
        disk.put(cm(0), encode(blob(0), "z"))
        (name,) = disk.conn.execute("SELECT file FROM chunks").fetchone()
        path = tmp_path / "data" / name
        path.write_bytes(b"\0" + path.read_bytes()[1:])
        with Pager(disk, RamCache(10**6), encode, decode) as pager:
            pager.prefetch(["d:0"])
            with pytest.raises(CorruptChunkError):
                pager.get("d:0")


def test_write_back_errors_surface_at_flush(tmp_path: Path) -> None:
    with DiskStore.open(tmp_path, "fp") as disk:
        pager = Pager(disk, RamCache(0), encode, decode)
        pager.save(cm(0), blob(0))
        pager.save(cm(1, "bad"), blob(1))  # returns at once; the error comes later
        with pytest.raises(CodecError):  # at the next save if the failure is already in, or flush
            pager.save(cm(2), blob(2))
            pager.flush()
        pager.flush()  # reported once
        keys = sorted(m.key for m in disk.chunks("d"))
        assert "d:0" in keys and "d:1" not in keys
        pager.save(cm(3, "bad"), blob(3))
        later = itertools.count(4)

        def surfaced() -> bool:  # or at the next save once the failure is in
            i = next(later)
            try:
                pager.save(cm(i), blob(i))
            except CodecError:
                return True
            return False

        until(surfaced, what="the failed save re-raised by a later save")
        pager.close()


def test_save_applies_backpressure(tmp_path: Path) -> None:
    gate = threading.Event()

    def slow_encode(b: np.ndarray, scheme: str) -> bytes:
        assert gate.wait(60)
        return b.tobytes()

    with DiskStore.open(tmp_path, "fp") as disk:
        pager = Pager(disk, RamCache(0), slow_encode, decode, writers=1, max_pending=2)
        pager.save(cm(0), blob(0))
        pager.save(cm(1), blob(1))
        done = threading.Event()

        def third() -> None:
            pager.save(cm(2), blob(2))
            done.set()

        threading.Thread(target=third).start()
        assert not done.wait(0.3)  # third save blocks while two are pending
        gate.set()
        assert done.wait(5)
        pager.close()
        assert len(disk.chunks("d")) == 3


def test_stats_persist_across_processes_and_opens(tmp_path: Path) -> None:
    for round_ in range(2):
        with DiskStore.open(tmp_path, "fp") as disk:
            ram = RamCache(10**6, disk.stats)
            with Pager(disk, ram, encode, decode) as pager:
                pager.save(cm(round_), blob(round_))
                pager.flush()
                pager.get(f"d:{round_}")  # disk read, then RAM
                pager.get(f"d:{round_}")
            disk.stats.add("window", "hits", 5)
    with DiskStore.open(tmp_path, None, readonly=True) as reader:
        snap: dict[str, Any] = snapshot(reader)
    tiers = snap["tiers"]
    assert tiers["window"]["hits"] == 10
    assert tiers["disk"]["hits"] == 2 and tiers["disk"]["bytes_written"] > 0
    assert tiers["ram"]["hits"] == 2 and tiers["ram"]["misses"] == 2
    assert set(tiers["ram"]) == {"hits", "misses", "bytes_read", "bytes_written", "evictions"}
    assert snap["latency"]["write"]["count"] == 2 and snap["latency"]["read"]["count"] == 2
    assert len(snap["latency"]["read"]["counts"]) == len(BUCKETS) + 1
    assert snap["owners"] == [
        {"owner": "d", "chunks": 2, "tokens": 16, "bytes": snap["disk"]["bytes"], "scheme": "z",
         "pinned": False}
    ]  # fmt: skip


def test_bucket_edges() -> None:
    assert bucket_of(0) == 0 and bucket_of(1e-5) == 0 and bucket_of(1.1e-5) == 1
    assert bucket_of(1e9) == len(BUCKETS)


def test_prefetch_and_get_pass_target_positions_to_the_decoder(tmp_path: Path) -> None:
    """decode(payload, at) is used where a target position is known; plain decode otherwise."""
    seen: list[int | None] = []

    def decode_at(payload: bytes, at: int | None = None) -> np.ndarray:
        seen.append(at)
        return decode(payload)

    with (
        DiskStore.open(tmp_path, "fp") as disk,
        Pager(disk, RamCache(10**6, disk.stats), encode, decode_at) as pager,
    ):
        for i in range(3):
            pager.save(cm(i), blob(i))
        pager.flush()
        pager.prefetch(["d:0", "d:1"], {"d:0": 100})
        assert np.array_equal(pager.get("d:0"), blob(0))
        assert np.array_equal(pager.get("d:1"), blob(1))
        assert np.array_equal(pager.get("d:2", at=7), blob(2))
    assert sorted(seen, key=str) == sorted([100, None, 7], key=str)


def test_prefetch_backlog_refills_beyond_the_limit(tmp_path: Path) -> None:
    """More keys than max_prefetch: the rest start as earlier ones are taken, none synchronously."""
    loads: list[str] = []
    decoded: list[str] = []

    def decode_logged(payload: bytes) -> np.ndarray:
        loads.append(threading.current_thread().name)
        state = decode(payload)
        decoded.append(threading.current_thread().name)
        return state

    for ram_bytes in (0, 10**7):  # states kept by their futures, or moved into RAM
        loads.clear()
        decoded.clear()
        with (
            DiskStore.open(tmp_path / str(ram_bytes), "fp") as disk,
            Pager(
                disk, RamCache(ram_bytes, disk.stats), encode, decode_logged, max_prefetch=2
            ) as pager,
        ):
            for i in range(7):
                pager.save(cm(i), blob(i))
            pager.flush()
            assert pager.prefetch([f"d:{i}" for i in range(7)]) == 2
            until(lambda: len(decoded) == 2, what="the two read-aheads decoded")
            assert len(loads) == 2  # done, and no more begun: read-ahead waits for the consumer
            for i in range(7):
                assert np.array_equal(pager.get(f"d:{i}"), blob(i))
        assert len(loads) == 7 and all(name.startswith("cascade-read") for name in loads)
