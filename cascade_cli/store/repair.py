"""Bring a store's index and data files back into agreement after a crash (run on open)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import zlib
from pathlib import Path

from cascade_cli.store.files import fsync_dir
from cascade_cli.store.records import RepairReport


def repair(conn: sqlite3.Connection, data: Path, *, full: bool = False) -> RepairReport:
    """Drop index rows whose file is missing or the wrong size (or, if ``full``, fails its
    checksum), then delete torn ``.tmp`` files and files no row references.

    The caller holds the store lock, so no writer is between "file durable" and "row
    committed" while this runs: any unreferenced file is garbage.
    """
    report = RepairReport()
    rows = conn.execute("SELECT key, file, nbytes, checksum FROM chunks").fetchall()
    bad: list[tuple[str, str]] = []
    for key, name, size, crc in rows:
        path = data / name
        try:
            actual = path.stat().st_size
        except FileNotFoundError:
            report.missing.append(key)
            bad.append((key, name))
            continue
        if actual != size:
            report.truncated.append(key)
            bad.append((key, name))
        elif full and zlib.crc32(path.read_bytes()) != crc:
            report.corrupt.append(key)
            bad.append((key, name))
    if bad:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("DELETE FROM chunks WHERE key = ?", [(k,) for k, _ in bad])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    touched: set[Path] = set()
    for _, name in bad:  # the bytes of dropped rows: short or corrupt files go too
        path = data / name
        with contextlib.suppress(FileNotFoundError):
            report.bytes_reclaimed += path.stat().st_size
            path.unlink()
            touched.add(path.parent)
    keep = {name for _, name, _, _ in rows} - {name for _, name in bad}
    for sub in sorted(p for p in data.iterdir() if p.is_dir()):
        for entry in os.scandir(sub):
            if not entry.is_file(follow_symlinks=False):
                continue
            name = f"{sub.name}/{entry.name}"
            if name in keep:
                continue
            with contextlib.suppress(FileNotFoundError):
                report.bytes_reclaimed += entry.stat(follow_symlinks=False).st_size
                os.unlink(entry.path)
            (report.temp_files if entry.name.endswith(".tmp") else report.orphan_files).append(name)
            touched.add(sub)
    for d in touched:
        fsync_dir(d)
    return report
