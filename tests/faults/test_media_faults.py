"""A full disk (RLIMIT_FSIZE) and a read-only store: one clear line, the store consistent."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.helpers import assert_one_line_error
from tests.cli.ingest_helpers import assert_error_last
from tests.documents.helpers import data_bytes, doc_rows
from tests.faults.helpers import LEFTOVERS, ask_args, new_doc, run, settle

pytestmark = pytest.mark.subprocess

#: Bytes any file may grow to: below one chunk's payload and the index's next WAL frames.
FSIZE = 96 * 1024


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE, FSIZE))


def test_disk_full_is_one_line_and_loses_nothing(fresh: Path) -> None:
    before = (doc_rows(fresh), data_bytes(fresh))
    args = new_doc(fresh)
    proc = run(args, fresh, preexec=_limit_file_size)
    assert proc.returncode == 5, (proc.returncode, proc.stderr)
    assert_error_last(proc, "I/O failed")
    assert "Check free disk space" in proc.stderr
    assert doc_rows(fresh)[0] == before[0][0]  # `base` untouched
    settle(fresh, LEFTOVERS)
    assert run(ask_args("base"), fresh).returncode == 0
    assert run(args, fresh).returncode == 0  # room again: the ingest completes
    assert [r[1:4] for r in doc_rows(fresh)] == [("base", 1, "ready"), ("f", 1, "ready")]


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[Path]:
    """`path` made read-only: a read-only bind mount as root (root ignores file modes),
    else the write bits cleared."""
    if os.geteuid() == 0:
        view = path.with_name(path.name + "-ro")
        view.mkdir()
        mounted = subprocess.run(["mount", "--bind", str(path), str(view)], check=False)
        if mounted.returncode != 0:
            pytest.skip("cannot bind-mount here (needs CAP_SYS_ADMIN)")
        try:
            subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], check=True)
            yield view
        finally:
            subprocess.run(["umount", str(view)], check=True)
        return
    modes = {p: p.stat().st_mode for p in [path, *path.rglob("*")]}
    for p, mode in modes.items():
        p.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        yield path
    finally:
        for p, mode in sorted(modes.items(), key=lambda kv: len(kv[0].parts)):
            p.chmod(mode)


def test_read_only_store_serves_readers_and_refuses_writers(fresh: Path) -> None:
    before = (doc_rows(fresh), data_bytes(fresh))
    args = new_doc(fresh)
    with read_only(fresh / "store") as ro:
        env = {"CASCADE_DISK_CACHE_PATH": str(ro)}
        for writer, what in ((args, "ingest"), (["rm", "base"], "rm")):
            proc = run(writer, fresh, env=env)
            assert_one_line_error(proc, "is read-only")
            assert proc.returncode == 5, what
        answer = run(ask_args("base"), fresh, env=env)
        assert answer.returncode == 0, answer.stderr
        for reader in (["docs", "--json"], ["stats", "--json"], ["verify"]):
            proc = run(reader, fresh, env=env)
            assert proc.returncode == 0, (reader, proc.stderr)
    assert (doc_rows(fresh), data_bytes(fresh)) == before
    assert run(["verify"], fresh).returncode == 0
    with contextlib.suppress(OSError):
        (fresh / "store-ro").rmdir()  # the mount point (never rmtree: it may still be mounted)
