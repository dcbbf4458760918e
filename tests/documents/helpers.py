"""Shared pieces of the ingest/ask tests: real texts, CLI runs, read-only looks at the store."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from cascade_cli import kv
from cascade_cli.documents.library import Library
from cascade_cli.samples import PERSUASION
from tests.suite_model import TEST_MODEL
from tests.wait import until

#: The checkout these tests belong to: subprocesses import cascade_cli from it, whatever their cwd.
ROOT = Path(__file__).resolve().parents[2]
#: The public-domain sample shipped in the package (chapters 1–4 of Austen's *Persuasion*).
SAMPLE = PERSUASION
#: Small settings so a real ingest of a few thousand tokens takes seconds on 2 cores.
SMALL = ["--gpu-cache-size", "512", "--block-size", "128"]
NEEDLE = "The pass key is 48213. Remember it."
#: Window and block of the in-process paging tests.
WINDOW = 512
BLOCK = 128


def sample_text(chars: int, start: int = 0) -> str:
    """A slice of the sample text (about 4 characters a token), cut at a line end."""
    text = SAMPLE.read_text(encoding="utf-8")[start:]
    cut = text.rfind("\n", 0, chars)
    return text[: cut + 1 if cut > 0 else chars]


def write_text(path: Path, chars: int, needle: str | None = None, start: int = 0) -> Path:
    """Write a slice of the sample to `path`, with `needle` as its own paragraph in the middle."""
    text = sample_text(chars, start)
    if needle:
        mid = text.find("\n\n", len(text) // 2)
        assert mid > 0
        text = f"{text[:mid]}\n\n{needle}\n\n{text[mid + 2 :]}"
    path.write_text(text, encoding="utf-8")
    return path


def env_for(home: Path) -> dict[str, str]:
    """The environment of a CLI run: only CASCADE_HOME, the suite's model and one thread.

    One thread, because llama.cpp's worker threads spin-wait: with two cores shared by other
    processes, two threads each run about ten times slower than one.
    """
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    path = os.pathsep.join(p for p in (str(ROOT), clean.get("PYTHONPATH", "")) if p)
    return {
        **clean,
        "CASCADE_HOME": str(home),
        "CASCADE_MODEL": TEST_MODEL,
        "CASCADE_THREADS": "1",
        "PYTHONPATH": path,
    }


def popen_cli(args: list[str], home: Path) -> subprocess.Popen[str]:
    """Start `python -m cascade_cli ARGS` in the background (stdout/stderr to files in home)."""
    out = (home / f"popen-{time.monotonic_ns()}.out").open("w")
    return subprocess.Popen(
        [sys.executable, "-m", "cascade_cli", *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
        env=env_for(home),
    )


def index_path(home: Path) -> Path:
    return home / "store" / "index.sqlite"


def ro(home: Path) -> sqlite3.Connection:
    """A read-only connection to the store's index (safe beside a running writer)."""
    conn = sqlite3.connect(f"file:{index_path(home)}?mode=ro", uri=True, timeout=30)
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


def query(home: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = ro(home)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def committed_chunks(home: Path) -> int:
    """Document chunk rows in the index so far; 0 while the index or its tables do not exist."""
    if not index_path(home).exists():
        return 0
    try:
        return int(query(home, "SELECT COUNT(*) FROM chunks WHERE owner LIKE 'doc:%'")[0][0])
    except sqlite3.OperationalError:
        return 0


def wait_for_chunks(proc: subprocess.Popen[str], home: Path, n: int, timeout: float = 120) -> int:
    """Wait until `n` document chunks are committed while `proc`, their writer, still runs;
    how many there were then."""

    def committed() -> int:
        assert proc.poll() is None, f"the ingest ended before {n} chunks were committed"
        count = committed_chunks(home)
        return count if count >= n else 0

    return until(committed, timeout, f"{n} committed chunks")


def kill_after_chunks(proc: subprocess.Popen[str], home: Path, n: int, timeout: float = 120) -> int:
    """SIGKILL `proc` once `n` chunks are committed; returns how many there were then."""
    wait_for_chunks(proc, home, n, timeout)
    proc.kill()
    proc.wait(30)
    assert proc.returncode == -9
    return committed_chunks(home)


def doc_rows(home: Path) -> list[tuple[Any, ...]]:
    """(id, name, version, status, tokens, chunks) of every document row."""
    return query(
        home, "SELECT id, name, version, status, tokens, chunks FROM documents ORDER BY id"
    )


def doc_id(home: Path, name: str) -> int:
    rows = query(
        home,
        "SELECT id FROM documents WHERE name = ? AND status = 'ready' ORDER BY version DESC",
        (name,),
    )
    assert rows, f"no ready document {name!r}"
    return int(rows[0][0])


def chunk_rows(home: Path, owner: str) -> list[dict[str, Any]]:
    """The chunk index rows of one owner, by index, tokens decoded."""
    rows = query(
        home,
        "SELECT key, idx, tok_start, tok_end, tokens, pos, created, file, nbytes FROM chunks"
        " WHERE owner = ? ORDER BY idx",
        (owner,),
    )
    return [
        {
            "key": key,
            "idx": idx,
            "start": s,
            "end": e,
            "tokens": np.frombuffer(toks, dtype="<i4").tolist(),
            "pos": pos,
            "created": created,
            "file": file,
            "nbytes": nbytes,
        }
        for key, idx, s, e, toks, pos, created, file, nbytes in rows
    ]


def passage_rows(home: Path, did: int) -> list[tuple[Any, ...]]:
    """(chunk, pidx, start, text, has vector) of a document's recall passages, in order."""
    return query(
        home,
        "SELECT p.chunk, p.pidx, p.start, p.text, p.vec IS NOT NULL FROM recall_passages p"
        " JOIN recall_corpora c ON c.id = p.corpus WHERE c.owner = ? ORDER BY p.chunk, p.pidx",
        (f"doc:{did}",),
    )


def data_bytes(home: Path) -> int:
    """Bytes of every file under the store's data directory."""
    data = home / "store" / "data"
    return sum(p.stat().st_size for p in data.rglob("*") if p.is_file())


def indexed_bytes(home: Path, where: str = "1") -> int:
    """Sum of nbytes of the chunk rows matching `where` (every row by default)."""
    return int(query(home, f"SELECT COALESCE(SUM(nbytes), 0) FROM chunks WHERE {where}")[0][0])


# ---- damaged chunks ----------------------------------------------------------------------------


def chunk_text(lib: Library, owner: str, idx: int) -> str:
    """A chunk's text as recall indexed it (its passages joined)."""
    rows = lib.conn.execute(
        "SELECT p.text FROM recall_passages p JOIN recall_corpora c ON c.id = p.corpus"
        " WHERE c.owner = ? AND p.chunk = ? ORDER BY p.pidx",
        (owner, idx),
    ).fetchall()
    return " ".join(t for (t,) in rows)


def file_of(lib: Library, key: str) -> Path:
    (name,) = lib.conn.execute("SELECT file FROM chunks WHERE key = ?", (key,)).fetchone()
    return lib.disk.path / "data" / name


def flip(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float32), b.astype(np.float32)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def kv_of(payload: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(K, V) of every layer, V by token rows."""
    blob = kv.parse(kv.decode(payload))
    k = np.stack(blob.k)
    v = np.stack([blob.v_rows(i) for i in range(blob.header.n_layer)])
    return k, v


def v_after_neighbour(ctx: Any, lib: Library, doc: Any, idx: int, window: int) -> np.ndarray:
    """V of chunk `idx` of `doc` decoded right after the sink and chunk idx - 1 alone: the
    chunk in a context other than the one ingest made it in (a recompute's yardstick)."""
    from cascade_cli.documents.frame import frame
    from cascade_cli.engine.live import Window

    win = Window(ctx, window)
    win.append(frame(ctx.model).prefix)
    win.append(lib.disk.meta(doc.chunk_key(idx - 1)).tokens.tolist())
    tokens = lib.disk.meta(doc.chunk_key(idx)).tokens.tolist()
    pos = win.end
    win.append(tokens)
    other = kv.parse(win.save(pos, pos + len(tokens)))
    win.reset()
    return np.stack([other.v_rows(i) for i in range(other.header.n_layer)])
