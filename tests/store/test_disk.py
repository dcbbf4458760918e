"""Disk tier: round trips, verification, repair, fingerprints, budget, migrations, read-only."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from cascade_cli.errors import (
    CorruptChunkError,
    FingerprintMismatchError,
    NotFoundError,
    StoreError,
)
from cascade_cli.store import ChunkMeta, DiskStore, register_migrations, snapshot
from cascade_cli.store.schema import registered


def meta(owner: str, idx: int, *, pinned: bool = False, n: int = 4) -> ChunkMeta:
    return ChunkMeta(
        f"{owner}:{idx}", owner, idx, idx * n, idx * n + n, np.arange(n) + idx, pos=idx * n,
        scheme="q4", pinned=pinned,
    )  # fmt: skip


def files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "data").rglob("*") if p.is_file())


def file_of(store: DiskStore, key: str) -> Path:
    (name,) = store.conn.execute("SELECT file FROM chunks WHERE key = ?", (key,)).fetchone()
    return store.path / "data" / name


def test_round_trip_and_meta(tmp_path: Path) -> None:
    payload = os.urandom(300_000)
    with DiskStore.open(tmp_path / "s", "fp") as store:
        assert store.repair_report.repaired is False
        rec = store.put(meta("doc", 1), payload)
        assert rec.nbytes == len(payload) and rec.fingerprint == "fp"
        assert store.get("doc:1") == payload
        buf = np.zeros(len(payload) + 10, np.uint8)
        assert store.get_into("doc:1", buf) == len(payload)
        assert buf[: len(payload)].tobytes() == payload
        m = store.meta("doc:1")
        assert (m.owner, m.index, m.start, m.end, m.pos, m.scheme) == ("doc", 1, 4, 8, 4, "q4")
        assert m.tokens.dtype == np.dtype("<i4") and m.tokens.tolist() == [1, 2, 3, 4]
        assert m.checksum == rec.checksum and store.exists("doc:1")
        assert store.total_bytes() == len(payload)
        with pytest.raises(NotFoundError):
            store.get("nope")
    with DiskStore.open(tmp_path / "s", "fp") as store:  # survives reopen
        assert store.get("doc:1") == payload


def test_overwrite_replaces_file_and_delete_owner_reclaims(tmp_path: Path) -> None:
    with DiskStore.open(tmp_path, "fp") as store:
        for i in range(3):
            store.put(meta("a", i), bytes([i]) * 1000)
        store.put(meta("b", 0), b"b" * 500)
        store.put(meta("a", 0), b"new" * 10)
        assert store.get("a:0") == b"new" * 10
        assert len(files(tmp_path)) == 4
        assert [m.index for m in store.chunks("a")] == [0, 1, 2]
        assert store.owners() == ["a", "b"]
        assert store.delete_owner("a") == 30 + 2000
        assert store.chunks("a") == [] and len(files(tmp_path)) == 1
        assert store.total_bytes() == 500
        assert store.delete("b:0") == 500 and files(tmp_path) == []


def test_flipped_byte_is_detected(tmp_path: Path) -> None:
    with DiskStore.open(tmp_path, "fp") as store:
        store.put(meta("d", 0), bytes(range(256)) * 100)
        path = file_of(store, "d:0")
        data = bytearray(path.read_bytes())
        data[12345] ^= 0x01
        path.write_bytes(data)
        with pytest.raises(CorruptChunkError):
            store.get("d:0")
        with pytest.raises(CorruptChunkError):
            store.get_into("d:0", bytearray(len(data)))
        assert store.meta("d:0").tokens.tolist() == [0, 1, 2, 3]  # still there to recompute from
        store.put(meta("d", 0), b"fresh")  # the caller recomputes and saves again
        assert store.get("d:0") == b"fresh"
    with DiskStore.open(tmp_path, "fp", verify="full") as store:
        assert store.repair_report.repaired is False


def test_full_verify_drops_corrupt_rows(tmp_path: Path) -> None:
    with DiskStore.open(tmp_path, "fp") as store:
        store.put(meta("d", 0), b"x" * 1000)
        path = file_of(store, "d:0")
    path.write_bytes(b"y" * 1000)
    with DiskStore.open(tmp_path, "fp", verify="full") as store:
        assert store.repair_report.corrupt == ["d:0"]
        assert not store.exists("d:0") and files(tmp_path) == []


def test_truncated_and_missing_files(tmp_path: Path) -> None:
    with DiskStore.open(tmp_path, "fp") as store:
        for i in range(3):
            store.put(meta("d", i), b"z" * 5000)
        short, gone = file_of(store, "d:0"), file_of(store, "d:1")
        with short.open("r+b") as fh:
            fh.truncate(4000)
        gone.unlink()
        with pytest.raises(CorruptChunkError, match="truncated"):
            store.get("d:0")
        with pytest.raises(CorruptChunkError, match="missing"):
            store.get("d:1")
    (tmp_path / "data" / "ab").mkdir(exist_ok=True)
    (tmp_path / "data" / "ab" / "orphan.kv").write_bytes(b"o" * 7)
    (tmp_path / "data" / "ab" / "torn.kv.tmp").write_bytes(b"t" * 3)
    with DiskStore.open(tmp_path, "fp") as store:
        rep = store.repair_report
        assert rep.truncated == ["d:0"] and rep.missing == ["d:1"]
        assert rep.orphan_files == ["ab/orphan.kv"] and rep.temp_files == ["ab/torn.kv.tmp"]
        assert rep.bytes_reclaimed == 4000 + 7 + 3
        assert "repaired" in rep.summary()
        assert [m.key for m in store.chunks("d")] == ["d:2"] and len(files(tmp_path)) == 1
    with DiskStore.open(tmp_path, "fp") as store:
        assert store.repair_report.repaired is False


def test_fingerprint_mismatch_refused(tmp_path: Path) -> None:
    with DiskStore.open(tmp_path, "model-a") as store:
        store.put(meta("d", 0), b"1")
    with pytest.raises(FingerprintMismatchError) as info:
        DiskStore.open(tmp_path, "model-b")
    assert "model-a" in info.value.message and "--disk-cache-path" in (info.value.fix or "")
    with DiskStore.open(tmp_path, None) as store:  # no check: e.g. `cascade rm`
        assert store.fingerprint == "model-a"
    with DiskStore.open(tmp_path, "model-a", timeout=0) as store:  # lock was released
        assert store.get("d:0") == b"1"


def test_budget_evicts_lru_unpinned_only(tmp_path: Path) -> None:
    with DiskStore.open(tmp_path, "fp", budget=4000) as store:
        store.put(meta("pin", 0, pinned=True), b"p" * 1000)
        for i in range(3):
            store.put(meta("u", i), b"u" * 1000)
        store.get("u:0")  # u:0 is now more recent than u:1
        store.put(meta("u", 3), b"u" * 1000)
        keys = {m.key for o in store.owners() for m in store.chunks(o)}
        assert keys == {"pin:0", "u:0", "u:2", "u:3"} and store.total_bytes() == 4000
        store.put(meta("pin", 1, pinned=True), b"p" * 3000)  # pinned data may exceed the budget
        assert store.exists("pin:0") and store.exists("pin:1")
        assert store.chunks("u") == []
        assert len(files(tmp_path)) == 2
        assert snapshot(store)["tiers"]["disk"]["evictions"] == 4
        assert store.set_pinned("pin", False) == 2


def test_register_migrations_from_outside(tmp_path: Path) -> None:
    def m001_documents(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE test_documents (name TEXT PRIMARY KEY, tokens INTEGER)")

    def m002_more(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE test_documents ADD COLUMN note TEXT")

    register_migrations("test_docs", [m001_documents])
    try:
        with DiskStore.open(tmp_path, "fp") as store, store.transaction() as conn:
            conn.execute("INSERT INTO test_documents VALUES ('a', 10)")
        register_migrations("test_docs", [m001_documents, m002_more])
        with DiskStore.open(tmp_path, "fp") as store:
            row = store.conn.execute("SELECT name, tokens, note FROM test_documents").fetchone()
            assert row == ("a", 10, None)
            applied = {r[1] for r in store.conn.execute("SELECT * FROM _migrations")}
            assert {"m001_initial", "m002_stats", "m001_documents", "m002_more"} <= applied
    finally:
        from cascade_cli.store import schema

        schema._REGISTRY.pop("test_docs", None)
    assert "test_docs" not in registered()


def test_newer_format_refused(tmp_path: Path) -> None:
    DiskStore.open(tmp_path, "fp").close()
    conn = sqlite3.connect(tmp_path / "index.sqlite")
    conn.execute("UPDATE store_meta SET value = '99' WHERE key = 'format_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        DiskStore.open(tmp_path, "fp")


def test_readonly_reads_and_refuses_writes(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        DiskStore.open(tmp_path / "none", None, readonly=True)
    with DiskStore.open(tmp_path, "fp") as writer:
        writer.put(meta("d", 0), b"abc")
        with DiskStore.open(tmp_path, None, readonly=True) as reader:  # beside the lock holder
            assert reader.get("d:0") == b"abc"
            assert snapshot(reader)["owners"][0]["chunks"] == 1
            with pytest.raises(StoreError, match="read-only"):
                reader.put(meta("d", 1), b"x")
        writer.put(meta("d", 1), b"def")
    assert writer.conn is not None
    with pytest.raises(StoreError, match="closed"):
        writer.put(meta("d", 2), b"x")
