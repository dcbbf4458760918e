"""Store holes found by the reliability review (issue 11): each test failed before its fix."""

from __future__ import annotations

import sqlite3
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cascade_cli.errors import FingerprintMismatchError, StaleStoreError, StoreLockedError
from cascade_cli.store import ChunkMeta, DiskStore, Pager, RamCache, snapshot
from cascade_cli.store import disk as disk_mod
from cascade_cli.store.disk import FLUSH_EVERY
from tests.wait import until


def encode(blob: np.ndarray, scheme: str) -> bytes:
    return zlib.compress(blob.tobytes(), 1)


def decode(payload: bytes) -> np.ndarray:
    return np.frombuffer(zlib.decompress(payload), np.uint8).copy()


def blob(i: int, n: int = 40_000) -> np.ndarray:
    return np.random.default_rng(i).integers(0, 8, n, dtype=np.uint8)


def cm(i: int, owner: str = "d", pinned: bool = False) -> ChunkMeta:
    return ChunkMeta(f"{owner}:{i}", owner, i, i * 8, i * 8 + 8, np.arange(8), pinned=pinned)


# ---- RAM tier -----------------------------------------------------------------------------------


def test_load_in_flight_does_not_put_a_stale_state_back(tmp_path: Path) -> None:
    """A prefetch that read the old bytes finishes after save() replaced the key: its state must
    not land in the RAM tier (the next get would serve the old KV)."""
    started, release = threading.Event(), threading.Event()

    def slow_decode(payload: bytes) -> np.ndarray:
        started.set()
        assert release.wait(60)
        return decode(payload)

    with DiskStore.open(tmp_path, "fp") as disk:
        ram = RamCache(10_000_000, disk.stats)
        with Pager(disk, ram, encode, slow_decode) as pager:
            disk.put(cm(0), encode(blob(0), ""))
            pager.prefetch(["d:0"])
            assert started.wait(60)
            pager.save(cm(0), blob(1))  # the new state, not cached
            release.set()
            pager.flush()
            assert np.array_equal(pager.get("d:0"), blob(1))
        # the pager is closed: its readers have stopped, the old load long finished
        cached = ram.peek("d:0")
        assert cached is None or np.array_equal(cached, blob(1))


def test_read_ahead_larger_than_ram_is_not_reloaded(tmp_path: Path) -> None:
    """Six prefetched states, a RAM tier that holds two: each is read from disk exactly once."""
    with DiskStore.open(tmp_path, "fp") as disk:
        ram = RamCache(2 * 40_000 + 100, disk.stats)
        with Pager(disk, ram, encode, decode, readers=2) as pager:
            for i in range(6):
                disk.put(cm(i), encode(blob(i), ""))
            hits0 = snapshot(disk)["tiers"]["disk"]["hits"]  # (merged every 2 s, or not yet)
            pager.prefetch([f"d:{i}" for i in range(6)])
            # every load done: the later ones evicted the earlier from RAM
            until(lambda: ram.evictions >= 4, what="six loads into a RAM tier that holds two")
            for i in range(6):
                assert np.array_equal(pager.get(f"d:{i}"), blob(i))
            hits = snapshot(disk)["tiers"]["disk"]["hits"] - hits0
            assert hits == 6, f"{hits - 6} prefetched state(s) were evicted and reloaded"


# ---- the shared connection ------------------------------------------------------------------------


def test_reads_wait_for_another_threads_transaction(tmp_path: Path) -> None:
    """A read through store.conn from another thread waits while a transaction is open, instead
    of running inside it (or stepping a cursor while it commits)."""
    with DiskStore.open(tmp_path, "fp") as store:
        store.put(cm(0), b"x" * 10)
        done = threading.Event()
        seen: list[int] = []

        def reader() -> None:
            seen.append(store.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])
            done.set()

        with store.transaction() as conn:
            conn.execute("DELETE FROM chunks")
            thread = threading.Thread(target=reader)
            thread.start()
            assert not done.wait(0.5), "the read ran inside another thread's transaction"
            conn.execute("INSERT INTO chunks SELECT * FROM chunks")  # still ours alone
        thread.join(10)
        assert seen == [0]


# ---- disk budget ----------------------------------------------------------------------------------


def test_put_that_cannot_evict_runs_no_query_for_it(tmp_path: Path) -> None:
    """Over budget with every chunk pinned: a put costs its own statements, no eviction scan."""
    with DiskStore.open(tmp_path, "fp", budget=1000) as store:
        for i in range(5):
            store.put(cm(i, pinned=True), b"p" * 600)
        statements: list[str] = []
        store.conn.set_trace_callback(statements.append)
        store.put(cm(9, pinned=True), b"p" * 600)
        store.conn.set_trace_callback(None)
        scans = [s for s in statements if "SUM(" in s or "pinned = 0" in s]
        assert not scans, scans
        assert len(store.chunks("d")) == 6


def test_budget_evicts_once_chunks_are_unpinned(tmp_path: Path) -> None:
    with DiskStore.open(tmp_path, "fp", budget=3000) as store:
        for i in range(4):
            store.put(cm(i, "a", pinned=True), b"a" * 1000)
        assert len(store.chunks("a")) == 4  # pinned: kept over budget
        store.set_pinned("a", False)
        store.put(cm(0, "b", pinned=True), b"b" * 1000)
        assert store.total_bytes() <= 3000
        assert [m.index for m in store.chunks("a")] == [2, 3]  # least recently used went first


# ---- counters -------------------------------------------------------------------------------------


class Skipping:
    """The `time` module of cascade_cli.store.disk, whose monotonic clock the test moves on."""

    def __init__(self) -> None:
        self.skipped = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.skipped

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def test_counters_reach_the_index_while_the_store_is_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Skipping()
    monkeypatch.setattr(disk_mod, "time", clock)
    with DiskStore.open(tmp_path, "fp") as store:
        store.put(cm(0), b"x" * 100)
        clock.skipped += FLUSH_EVERY  # the merge period has passed for the store
        store.get("d:0")
        other = sqlite3.connect(tmp_path / "index.sqlite")
        try:
            rows = dict(((t, n), v) for t, n, v in other.execute("SELECT * FROM stats_counters"))
        finally:
            other.close()
        assert rows.get(("disk", "bytes_written")) == 100
        assert rows.get(("disk", "hits")) == 1


# ---- readers beside a writer ----------------------------------------------------------------------


def test_shared_reader_beside_a_writer(tmp_path: Path) -> None:
    with DiskStore.open(tmp_path, "fp") as writer:
        writer.put(cm(0), b"w" * 100)
        with DiskStore.open(tmp_path, "fp", mode="shared") as reader:
            assert reader.get("d:0") == b"w" * 100
            with pytest.raises(StoreLockedError):
                reader.put(cm(1), b"r" * 100)  # saving needs the writer lock
            writer.put(cm(2), b"w" * 100)
            assert reader.exists("d:2")
            reader.flush()  # counters and access times merge beside the writer
    with DiskStore.open(tmp_path, "fp", mode="shared") as reader:
        reader.put(cm(1), b"r" * 100)  # no writer: the lock is free
    with DiskStore.open(tmp_path, "fp") as store:
        assert not store.repair_report.repaired
        assert [m.index for m in store.chunks("d")] == [0, 1, 2]


# ---- identity ---------------------------------------------------------------------------------------


def test_llama_cpp_version_change_asks_for_a_rebuild(tmp_path: Path) -> None:
    layout = {"llama_cpp": ("0.3.36",), "payload_format": ("2", "1")}
    DiskStore.open(tmp_path, "fp", layout=layout).close()
    newer = {"llama_cpp": ("0.3.99",), "payload_format": ("2", "1")}
    with pytest.raises(
        StaleStoreError, match=r"llama\.cpp 0\.3\.36; this cascade uses 0\.3\.99"
    ) as e:
        DiskStore.open(tmp_path, "fp", layout=newer, readonly=True)
    assert "Rebuild it" in e.value.one_line()
    with pytest.raises(StaleStoreError, match="KV payload format 2"):
        DiskStore.open(tmp_path, "fp", layout={"payload_format": ("3",)})
    DiskStore.open(tmp_path, "fp", layout={"payload_format": ("3", "2")}).close()  # reads 2
    with pytest.raises(StaleStoreError, match="payload format 3"):  # now holds format 3
        DiskStore.open(tmp_path, "fp", layout=layout)


def test_store_from_before_the_layout_conversion_still_opens(tmp_path: Path) -> None:
    DiskStore.open(tmp_path, "fp-flash-attn-off").close()
    DiskStore.open(tmp_path, "fp").close()
    with pytest.raises(FingerprintMismatchError):
        DiskStore.open(tmp_path, "other")


def test_a_reader_upgrades_a_store_an_older_release_wrote(tmp_path: Path) -> None:
    DiskStore.open(tmp_path, "fp").close()
    conn = sqlite3.connect(tmp_path / "index.sqlite")
    with conn:  # as the release before the evicted table left it
        conn.execute("DROP TABLE evicted")
        conn.execute("DELETE FROM _migrations WHERE name = 'm003_evicted'")
    conn.close()
    with DiskStore.open(tmp_path, None, readonly=True) as store:  # e.g. `cascade stats`
        assert store.evicted("d") == set()
