"""The store lock across processes: a second opener waits, then fails naming the holder."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cascade_cli.errors import StoreLockedError
from cascade_cli.store import DiskStore, snapshot

ROOT = Path(__file__).resolve().parents[2]
HOLDER = r"""
import sys, time
from cascade_cli.store import ChunkMeta, DiskStore
store = DiskStore.open(sys.argv[1], "fp")
store.put(ChunkMeta("d:0", "d", 0, 0, 1, [7]), b"held")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
store.close()
print("released", flush=True)
time.sleep(30)
"""


def hold(root: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


@pytest.mark.subprocess
def test_second_opener_waits_then_names_holder(tmp_path: Path) -> None:
    proc = hold(tmp_path, 60)
    try:
        start = time.monotonic()
        with pytest.raises(StoreLockedError) as info:
            DiskStore.open(tmp_path, "fp", timeout=0.6)
        assert time.monotonic() - start >= 0.6
        assert str(proc.pid) in info.value.message and info.value.fix
        with DiskStore.open(tmp_path, "fp", readonly=True) as reader:  # stats still work
            assert reader.get("d:0") == b"held"
            assert snapshot(reader)["disk"]["chunks"] == 1
    finally:
        proc.kill()
        proc.wait()
    with DiskStore.open(tmp_path, "fp", timeout=2) as store:  # death releases the lock
        assert store.get("d:0") == b"held"


@pytest.mark.subprocess
def test_second_opener_gets_the_lock_when_released(tmp_path: Path) -> None:
    proc = hold(tmp_path, 0.5)
    try:
        with DiskStore.open(tmp_path, "fp", timeout=120) as store:
            assert store.exists("d:0")
            # released, not died: the holder lives on for 30 s after letting go
            assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_same_process_second_open_is_refused(tmp_path: Path) -> None:
    with DiskStore.open(tmp_path, "fp"), pytest.raises(StoreLockedError, match=str(os.getpid())):
        DiskStore.open(tmp_path, "fp", timeout=0)
