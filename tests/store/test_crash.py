"""Crash safety: a writer process is SIGKILLed at random moments and at named crash points;
the reopened store must hold exactly the acknowledged state (or that plus the one op in flight),
every row readable and verified, and no file that no row references."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cascade_cli.store import DiskStore

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]

#: Shared by the writer process and the checker: a deterministic op list and payloads.
LIB = r"""
import hashlib
import random

def payload(key, gen):
    seed = hashlib.blake2b(f"{key}/{gen}".encode(), digest_size=8).digest()
    size = 1 + int.from_bytes(seed[:3], "little") % 120_000
    return (seed * (size // 8 + 1))[:size]

def ops(seed, n=100_000):
    rng = random.Random(seed)
    for _ in range(n):
        owner = f"doc{rng.randrange(4)}"
        if rng.random() < 0.12:
            yield ("del", owner, None, None)
        else:
            idx = rng.randrange(8)
            yield ("put", owner, idx, rng.randrange(1, 1 << 30))
"""

WRITER = (
    LIB
    + r"""
import sys
from cascade_cli.store import ChunkMeta, DiskStore

store = DiskStore.open(sys.argv[1], "fp", timeout=10)
print("open", flush=True)
for i, (op, owner, idx, gen) in enumerate(ops(int(sys.argv[2]))):
    if op == "del":
        store.delete_owner(owner)
    else:
        key = f"{owner}:{idx}"
        meta = ChunkMeta(key, owner, idx, idx * 4, idx * 4 + 4, [idx, gen % 997, 0, 1], pos=gen)
        store.put(meta, payload(key, gen))
    print(i, flush=True)
"""
)

lib: dict[str, Any] = {}
exec(LIB, lib)


def apply(state: dict[str, int], op: tuple[str, str, int | None, int | None]) -> dict[str, int]:
    kind, owner, idx, gen = op
    out = dict(state)
    if kind == "del":
        for key in [k for k in out if k.startswith(owner + ":")]:
            del out[key]
    else:
        assert gen is not None
        out[f"{owner}:{idx}"] = gen
    return out


def start(root: Path, seed: int, crash: str | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("CASCADE_STORE_CRASH", None)
    if crash:
        env["CASCADE_STORE_CRASH"] = crash
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), str(seed)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def acknowledged(proc: subprocess.Popen[str]) -> int:
    """Ops the writer reported done (it printed their index after they returned)."""
    assert proc.stdout is not None
    lines = proc.stdout.read().split()
    assert lines[0] == "open"
    return len(lines) - 1


def check(root: Path, seed: int, acked: int) -> Any:
    """Reopen, verify every row's bytes, compare with the acknowledged ops; return the report."""
    gen_ops = lib["ops"](seed, acked + 1)
    state: dict[str, int] = {}
    for _ in range(acked):
        state = apply(state, next(gen_ops))
    after = apply(state, next(gen_ops))
    with DiskStore.open(root, "fp") as store:
        report = store.repair_report
        found: dict[str, int] = {}
        for owner in store.owners():
            for m in store.chunks(owner):
                assert store.get(m.key) == lib["payload"](m.key, m.pos)
                assert m.tokens.tolist() == [m.index, m.pos % 997, 0, 1]
                found[m.key] = m.pos
        referenced = {r[0] for r in store.conn.execute("SELECT file FROM chunks")}
    on_disk = {str(p.relative_to(root / "data")) for p in (root / "data").rglob("*") if p.is_file()}
    assert on_disk == referenced, "orphan or missing files after repair"
    assert found in (state, after), (
        f"store is neither the acknowledged state nor one op later ({acked} acked)"
    )
    with DiskStore.open(root, "fp") as store:
        assert not store.repair_report.repaired
    return report


def test_sigkill_at_random_points(tmp_path: Path) -> None:
    rng = random.Random(1234)
    for round_ in range(12):
        root = tmp_path / f"r{round_}"
        seed = rng.randrange(1 << 30)
        proc = start(root, seed)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 15)
        assert ready, "writer did not start"
        time.sleep(rng.uniform(0.02, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        acked = acknowledged(proc)
        check(root, seed, acked)


@pytest.mark.parametrize(
    ("point", "expect"),
    [
        ("after_tmp_write:5", "temp"),
        ("after_data_fsync:5", "orphan"),
        ("after_commit:7", "orphan"),  # the 7th put replaced a key: the old file is left over
        ("delete_after_commit:3", "orphans"),  # rows gone, the owner's 4 files not yet unlinked
    ],
)
def test_crash_points(tmp_path: Path, point: str, expect: str | None) -> None:
    seed = 42
    proc = start(tmp_path, seed, crash=point)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    report = check(tmp_path, seed, acknowledged(proc))
    if expect == "temp":
        assert len(report.temp_files) == 1 and not report.orphan_files
    elif expect == "orphan":
        assert len(report.orphan_files) == 1 and not report.temp_files
    elif expect == "orphans":
        assert len(report.orphan_files) > 1
    assert not report.dropped_keys  # no row ever pointed at missing or torn bytes
